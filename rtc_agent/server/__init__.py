"""The HTTP server's parts: signaling, sessions, pages, health and metrics. The application that mounts them
(:func:`rtc_agent.app.create_app`) sits above every layer."""
