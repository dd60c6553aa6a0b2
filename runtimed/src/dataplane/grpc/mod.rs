//! The gRPC services the control plane calls: `FunctionRuntime` and
//! `SessionRuntime`. Both admit the control-plane identity only.

pub mod function;
pub mod session;

pub use function::FunctionService;
pub use session::SessionService;

use tonic::Status;

use crate::registration::RegisterError;

/// The status of a refused Register or OpenSession: the same for both modes.
pub fn register_status(e: RegisterError) -> Status {
    match &e {
        RegisterError::Invalid(_) => Status::invalid_argument(e.to_string()),
        RegisterError::Conflict(_) => Status::already_exists(e.to_string()),
        RegisterError::Stale { .. } | RegisterError::Load(_) => {
            Status::failed_precondition(e.to_string())
        }
        RegisterError::Unavailable(_) => Status::unavailable(e.to_string()),
    }
}
