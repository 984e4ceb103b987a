//! Activation actuators (being built).
