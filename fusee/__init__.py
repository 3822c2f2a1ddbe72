"""fusee: embeddable durable execution on a group-committed journal, built on ensemble."""
