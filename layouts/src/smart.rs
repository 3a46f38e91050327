//! SMART node formats (issue 5).
