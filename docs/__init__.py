"""The documentation site's sources (MkDocs) and the generator of its reference pages."""
