"""Auto-tuning: tasks, records, the multi-network scheduler, Droplet descent, the tuning loop."""
