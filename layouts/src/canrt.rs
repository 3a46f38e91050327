//! CANRT node formats (in progress).
