//! Classifiers: decide an item's class, separately from the discipline that queues it.
