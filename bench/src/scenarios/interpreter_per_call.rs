//! The original design's model for comparison: a new Python interpreter per
//! call that imports the echo handler and calls it once.

use super::context::Ctx;
use super::local::Local;
use super::{ECHO_PY, INPUT};
use crate::Sizes;
use crate::paths::Spawn;

/// Records `spawn-python`.
pub(super) async fn run(ctx: &mut Ctx, local: &Local, sizes: &Sizes) -> anyhow::Result<()> {
    ctx.bar.set_message("spawn-python");
    let spawn = Spawn::new(&local.tmp.path().join("spawn"), ECHO_PY, INPUT)?;
    ctx.sequential("spawn-python", 3, sizes.spawn, || spawn.call())
        .await;
    Ok(())
}
