"""The HTTP servers' configuration: :mod:`.admin` reads the ``Admin`` section (the monitoring
interface, its headers, CORS, anonymous paths, session cookie and HTTPS), :mod:`.protocols` the
``Protocols`` section and the options of a custom ``websocket`` protocol (``HTTPHeader``,
``WWWAuthenticate``, ``TrustedAdmin``), and :mod:`.headers` is the one check every configured
response header goes through. (Nothing is imported here: ``config.instance_sections`` uses
``headers`` and is used by the other two.)"""
