//! The report as one self-contained HTML page in the dashboard's style:
//! inline CSS, its numbers as JSON, SVG charts drawn by an inline script,
//! nothing fetched.

use super::Report;

/// The page around the data; `/*DATA*/` is replaced by the report's JSON.
const TEMPLATE: &str = include_str!("page.html");

pub(super) fn render(report: &Report) -> String {
    let json = serde_json::to_string(report).unwrap_or_else(|_| "{}".to_owned());
    // `<` escaped keeps `</script>` in a prompt id or a flag from ending
    // the data block; JSON reads `\u003c` back as `<`.
    let json = json.replace('<', "\\u003c");
    TEMPLATE.replace("/*DATA*/", &json)
}
