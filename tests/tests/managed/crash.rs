//! Placeholder: the SIGKILL crash test of pre-approved installs (being written).
