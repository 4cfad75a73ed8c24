"""Tables, engine and sessions, the run repository, and the pydantic contracts at the edges."""
