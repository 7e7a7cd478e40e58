"""The AMPS version the emulator reports (logon acks): a leaf module, so any part of the
server may import it without importing the server itself."""

SERVER_VERSION = "5.3.4.0"
