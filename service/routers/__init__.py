"""One router per resource: applications, data samples and rounds, audit, UI, operations."""
