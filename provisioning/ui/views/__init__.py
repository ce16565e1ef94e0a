"""Dashboard pages, one module per page. Each view reads through the same querysets and
services as the REST API; none holds logic of its own beyond shaping a page."""
