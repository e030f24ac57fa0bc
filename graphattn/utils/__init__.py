"""Input validation and file helpers shared by every layer of the package."""
