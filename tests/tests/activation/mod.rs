//! Activation actuators against temporary home and project directories.

mod agents;
mod catalog;
mod crash;
mod engine;
mod fixture;
mod ledger;
mod mcp;
mod skills;
mod trees;
mod unit;
