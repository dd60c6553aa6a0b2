//! The gRPC services the control plane calls: `FunctionRuntime` and
//! `SessionRuntime`. Both admit the control-plane identity only.

pub mod function;
pub mod session;

pub use function::FunctionService;
pub use session::SessionService;
