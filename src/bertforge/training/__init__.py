"""The one training loop, its optimizer and schedules, checkpoints, device and tracking."""
