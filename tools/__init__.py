"""Command-line tools that are not the service: the offline model bundle."""
