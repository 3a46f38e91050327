//! CANRT: client-active persistent radix tree on NVM (in progress).
