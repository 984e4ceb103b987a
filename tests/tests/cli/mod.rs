//! Black-box tests of the `ctx` binary: they run it as a host or an operator would.

mod adversary;
mod asked_once;
mod audit;
mod browser;
mod demo;
mod hook;
mod host;
mod init;
mod leftovers;
mod killed;
mod lock_wait;
mod person;
mod postgres;
mod webdriver;
