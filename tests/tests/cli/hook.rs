//! `ctx hook`: the hosts' hook JSON round trip.
