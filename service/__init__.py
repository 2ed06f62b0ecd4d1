"""The local service: HTTP server, jobs, streaming, command line and a client for deployed endpoints."""
