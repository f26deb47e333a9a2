"""Who may talk to the server: TLS on every port (``tls``) and API keys (``keys``).

Both are set up once at start from the settings; the transports only hold what is built here
(an ``ssl.SSLContext`` for the listening sockets, a ``Guard`` for requests)."""
