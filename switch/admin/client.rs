//! placeholder: the admin client (being written)
