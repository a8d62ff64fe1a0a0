"""A minimal Django project embedding a timewheel scheduler (see ``docs/web.md``)."""
