//! Black-box tests of the `ctx` binary: they run it as a host or an operator would.

mod adversary;
mod asked_once;
mod audit;
mod browser;
mod catalog_build;
mod catalog_links;
mod compact;
mod demo;
mod hook;
mod host;
mod init;
mod integrity;
mod killed;
mod leftovers;
mod lock_wait;
mod moved;
mod person;
mod postgres;
mod prompt_words;
mod skill_trees;
mod webdriver;
