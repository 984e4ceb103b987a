//! Activation actuators against temporary home and project directories.

mod agents;
mod catalog;
mod crash;
mod fixture;
mod ledger;
mod mcp;
mod skills;
