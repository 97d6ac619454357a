//! bdevkit core (work in progress).
