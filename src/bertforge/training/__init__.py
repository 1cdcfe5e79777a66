"""The one training loop, its optimizer and schedules, and atomic checkpoint writes."""
