"""Handler execution: lane slots, thread lanes, the event loop of async handlers, payloads in and results out."""
