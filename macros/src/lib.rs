//! Procedural macros of flaxen.
