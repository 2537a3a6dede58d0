//! The text of an `alerts` answer (also the alerts part of triage's report.txt).

use capsule_analytics::alerts::Alert;

use super::table::{Column, Table};
use super::Place;

/// The human table: one row per alert, its summary and query under it.
pub(crate) fn table(list: &[Alert], place: Place<'_>, width: Option<usize>) -> Vec<String> {
    if list.is_empty() {
        return vec!["alerts: none".into()];
    }
    let mut t = Table::new(vec![
        Column::left("severity", 6),
        Column::left("rule", 10),
        Column::left("first", 9),
        Column::left("last", 9),
        Column::left("entity", u8::MAX),
    ]);
    for x in list {
        t.push(vec![
            format!("{:?}", x.severity).to_lowercase(),
            x.rule.to_string(),
            super::ms(x.first_ns),
            super::ms(x.last_ns),
            x.entity.name.clone(),
        ]);
    }
    let mut lines = vec![format!("alerts: {}", list.len())];
    lines.extend(t.render(width));
    lines.push(String::new());
    for (i, x) in list.iter().enumerate() {
        lines.push(format!("{}. [{}] {}", i + 1, x.rule, x.summary));
        lines.push(format!(
            "   {}",
            super::pasteable(&x.query, &format!("alert-{}.pcap", i + 1), place)
        ));
    }
    lines
}
