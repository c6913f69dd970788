"""Loading this file puts its folder on ``sys.path``, so tests in sub-folders import ``mechanism_helpers``,
``streams`` and the other helper modules here (helpers are never imported from a conftest by name: two
conftest modules shadow each other)."""
