"""The REST service and web page (DESIGN.md: service/)."""
