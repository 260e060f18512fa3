"""What keeps the record true and small without anybody asking: restart recovery, retention."""
