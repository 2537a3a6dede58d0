//! The alerts view (`/alerts`): the config's `[alerts]` rules over the window and filter (the
//! answer of `capsule alerts`), grouped by cause (the rule), worst cause first; each alert
//! with what it found, when, and its evidence: the pcapng of its packets, its sessions and
//! the `capsule query` line that exports them.

use std::fmt::Write as _;

use hyper::Response;

use super::super::body::Body;
use super::super::guard::{Failure, Guard};
use super::pages::{
    asked, at, bad_input, esc, export_links, page, partial, respond, window_form, Asked, Nav,
};
use capsule_analytics::alerts::{Alert, Severity};
use capsule_answers::analytics::{self as answers, Body as Answer, Question};
use capsule_answers::Source;

/// What a rule's alerts are about, in words (docs/alerts.md).
fn cause(rule: &str) -> &'static str {
    match rule {
        "egress" => "Traffic to destinations the egress policy does not allow",
        "off_hours" => "Traffic out of work hours to addresses in no group",
        "dscp" => "DSCP values their senders may not use",
        "group_pair" => "Traffic between groups the policy keeps apart",
        "straggler" => "Group members far under their group's median",
        "tcp_retransmissions" => "Hosts retransmitting a large share of their data",
        "tcp_zero_window" => "Hosts closing their receive window",
        "ef_share" => "EF over its share of the link",
        "microburst" => "Millisecond bursts over the link's rate",
        "incast" => "Many senders to one destination in one millisecond",
        "rate_ceiling" => "Groups over their expected rate",
        "active_hours" => "Groups active out of their expected hours",
        _ => "Other findings",
    }
}

/// The causes of `alerts` with their alerts, worst first (by the worst severity, then the
/// number of alerts, then the rule's name); within a cause, the answer's own order.
fn by_cause(alerts: &[Alert]) -> Vec<(&'static str, Vec<&Alert>)> {
    let mut out: Vec<(&'static str, Vec<&Alert>)> = Vec::new();
    for a in alerts {
        match out.iter_mut().find(|(r, _)| *r == a.rule) {
            Some((_, v)) => v.push(a),
            None => out.push((a.rule, vec![a])),
        }
    }
    out.sort_by_key(|(rule, v)| {
        (
            v.iter().map(|a| a.severity).min().unwrap_or(Severity::Low),
            std::cmp::Reverse(v.len()),
            *rule,
        )
    });
    out
}

/// `GET /alerts`: the config's rules over the window and filter, by cause.
pub(super) async fn alerts(g: Guard, nav: Nav, q: Option<&str>) -> Response<Body> {
    let (view, action) = ("view-alerts", "/alerts");
    let Asked { w, query, .. } = match asked(q, &[], |_| Ok(())) {
        Ok(a) => a,
        Err((w, e)) => return bad_input(g, &nav, view, action, &w, &e),
    };
    let mut b = window_form(action, &w, "");
    if g.server.config.is_none() {
        b.push_str(
            "<p class=\"note\" data-testid=\"alerts-no-config\">Alerts are the config's \
             <code>[alerts]</code> rules over its groups and policy: this server has no config \
             (<code>capsule serve --config FILE</code>).</p>",
        );
        return respond(g, page("Alerts", Some(&nav), view, &w, "", &b), &[]);
    }
    let (source, server) = (g.source(), g.server.clone());
    let work = move || {
        let source = Source {
            config: server.load_config()?,
            ..source
        };
        let request = answers::Request {
            query,
            question: Question::Alerts,
        };
        answers::answer(&source, &request).map_err(Failure::of)
    };
    let (g, a) = match g.blocking("alerts", true, work).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let missing = a.missing();
    let Answer::Alerts { alerts } = &a.body else {
        return g.refuse(
            hyper::StatusCode::INTERNAL_SERVER_ERROR,
            "the alerts question got another answer",
        );
    };
    b.push_str(&partial(&missing));
    let causes = by_cause(alerts);
    let _ = write!(
        b,
        "<p data-testid=\"alerts-summary\">{} alert(s) of {} cause(s) from {} to {}.</p>",
        alerts.len(),
        causes.len(),
        at(a.window.from_ns),
        at(a.window.to_ns)
    );
    if alerts.is_empty() {
        b.push_str("<p>No rule fired in the window.</p>");
    }
    let place = nav.place();
    for (rule, list) in &causes {
        let _ = write!(
            b,
            "<section class=\"cause\" data-testid=\"cause-{}\" data-rule=\"{}\"><h2>{} \
             <small>({}, {} alert(s))</small></h2>",
            esc(rule),
            esc(rule),
            esc(cause(rule)),
            esc(rule),
            list.len()
        );
        for al in list {
            let sev = format!("{:?}", al.severity).to_lowercase();
            let _ = write!(
                b,
                "<div class=\"alert {sev}\" data-testid=\"alert\"><p><span class=\"sev {sev}\">{sev}\
                 </span> <strong>{}</strong> {} – {}</p><p>{}</p><p class=\"evidence\">Evidence: \
                 {}</p></div>",
                esc(&al.entity.name),
                at(al.first_ns),
                at(al.last_ns),
                esc(&al.summary),
                export_links(&al.query, &place)
            );
        }
        b.push_str("</section>");
    }
    b.push_str("<h2>What this page cannot see</h2><ul class=\"limits\">");
    for line in a.window.limits.lines() {
        let _ = write!(b, "<li>{}</li>", esc(&line));
    }
    b.push_str("</ul>");
    respond(g, page("Alerts", Some(&nav), view, &w, "", &b), &missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_analytics::alerts::Entity;

    fn alert(rule: &'static str, severity: Severity) -> Alert {
        Alert {
            rule,
            severity,
            entity: Entity {
                kind: "host",
                name: "10.0.0.1".into(),
                hosts: vec!["10.0.0.1".into()],
            },
            summary: String::new(),
            first_ns: 0,
            first: String::new(),
            last_ns: 0,
            last: String::new(),
            figures: Default::default(),
            query: capsule_analytics::Export {
                from_ns: 0,
                to_ns: 1,
                within: capsule_query::Filter::all(),
                filter: capsule_query::Filter::all(),
                store: String::new(),
            },
        }
    }

    #[test]
    fn causes_group_their_alerts_worst_first() {
        let alerts = [
            alert("dscp", Severity::Medium),
            alert("egress", Severity::High),
            alert("dscp", Severity::Medium),
            alert("tcp_zero_window", Severity::Medium),
        ];
        let got: Vec<(&str, usize)> = by_cause(&alerts)
            .iter()
            .map(|(r, v)| (*r, v.len()))
            .collect();
        assert_eq!(got, [("egress", 1), ("dscp", 2), ("tcp_zero_window", 1)]);
        for r in capsule_config::ALERT_RULES {
            assert_ne!(cause(r), "Other findings", "{r} has its words");
        }
    }
}
