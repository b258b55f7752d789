//! Dispatch policies: which worker thread takes the next packet block (P1).
