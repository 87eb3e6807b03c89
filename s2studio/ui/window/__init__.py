"""The studio window: the main window that composes the regions and the controllers, and the mediators that
stand between several of them (the line states, the transport)."""
