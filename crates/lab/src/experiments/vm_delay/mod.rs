mod model;
pub use model::*;
