"""A fourth backend built by following docs/adding-a-backend.md, kept out of the package."""
