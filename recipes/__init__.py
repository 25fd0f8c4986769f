"""Training recipes: thin absl apps (a model and its default data) on toolkit.train."""
