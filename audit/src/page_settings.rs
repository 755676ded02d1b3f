//! Each library page's settings paragraph (a generated block, `audit-settings-<library>`): the
//! settings its cells ran with, the library's documented production defaults with where they come
//! from, and any setting the library warns against that a cell runs at.

use crate::libraries::Library;
use crate::settings::Timing;

/// How a set of numbers reads on a page.
fn numbers(t: &Timing) -> String {
    let heartbeat = match t.heartbeat_s > 0.0 {
        true => format!("a heartbeat every {} s", t.heartbeat_s),
        false => "no heartbeat".into(),
    };
    format!("stall threshold {} s, {heartbeat}, recovery every {} s", t.stall_s, t.sweep_s)
}

/// The settings block of `lib`'s page.
pub fn markdown(lib: &Library) -> String {
    let deviation = match lib.production.deviation {
        "" => String::new(),
        d => format!(" A `--settings production` run differs by: {d}."),
    };
    let warns = match lib.warns {
        "" => "none known to the audit at this version".to_string(),
        w => w.to_string(),
    };
    format!(
        "- **Ran with** (`--settings fast`, the published table): {} (as configured: {}).\n\
         - **The library's production defaults** (`--settings production`; {}): {}.{deviation}\n\
         - **Settings the library warns against**: {warns}.\n",
        numbers(&lib.fast),
        lib.recovery,
        numbers(&lib.production.timing),
        lib.production.defaults,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libraries::LIBRARIES;

    #[test]
    fn every_library_states_what_it_ran_with_its_defaults_and_its_warnings() {
        for l in LIBRARIES {
            let m = markdown(l);
            assert!(m.contains(l.recovery) && m.contains(l.production.defaults), "{}", l.name);
            assert!(m.contains(&format!("stall threshold {} s", l.fast.stall_s)), "{m}");
            assert!(m.contains("warns against") && m.lines().count() == 3, "{m}");
        }
        let dq = LIBRARIES.iter().find(|l| l.name == "django_q2").expect("django_q2");
        assert!(markdown(dq).contains("Retry and timeout are misconfigured"), "its warning is named");
    }
}
