"""Tables, engine and sessions, one store per table family, and the contracts at the edges."""
