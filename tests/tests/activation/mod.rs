//! Activation actuators against temporary home and project directories.
