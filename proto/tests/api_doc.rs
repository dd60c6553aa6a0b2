//! docs/api.md's error table is generated from the codes themselves
//! (`kruntimes_proto::api::error_table`): this test fails when the page is
//! stale, and with `KRUNTIMES_BLESS=1` rewrites it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

const BEGIN: &str = "<!-- error-table:begin";
const END: &str = "<!-- error-table:end -->";

#[test]
fn the_error_table_of_docs_api_md_is_generated_from_the_codes() {
    // At run time: a shared target directory may hold this test built in
    // another checkout.
    let path = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from)
        .join("../docs/api.md");
    let page = std::fs::read_to_string(&path).unwrap();
    let start = page
        .find(BEGIN)
        .expect("docs/api.md has no error-table marker");
    let body = start + page[start..].find("-->").expect("an unclosed marker") + "-->".len();
    let end = page[body..].find(END).expect("no end marker") + body;
    let expected = format!("\n{}", kruntimes_proto::api::error_table());
    if page[body..end] == expected {
        return;
    }
    if std::env::var_os("KRUNTIMES_BLESS").is_some() {
        let fresh = format!("{}{}{}", &page[..body], expected, &page[end..]);
        std::fs::write(&path, fresh).unwrap();
        return;
    }
    panic!(
        "docs/api.md's error table is stale: run `KRUNTIMES_BLESS=1 cargo test -p kruntimes-proto --test api_doc` \
         (it is generated from kruntimes_proto::api::ErrorCode)"
    );
}
