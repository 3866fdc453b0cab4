"""Getting at stored bytes: stores resolved from paths and URLs, byte sources reading many
objects and ranges at once, and safe file operations for writers."""
