"""The HTTP vocabulary that belongs to no server: requests, responses, routes, the router, the
application, CORS and content coding; what protocols speak and transports serve."""
