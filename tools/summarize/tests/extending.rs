//! The README's "Adding a note" and "Adding a record kind", as a test: a note is one function
//! and one line in the notes list, a table section one function and one line in the sections
//! list. Here a note and a section are added that way, beside the real lists (through
//! `summarize::tables_with`, which the real run calls with `NOTES` and `SECTIONS`), and
//! summarize prints each where its line puts it, the rest of the report unchanged. The section
//! reads a kind `input` keeps whole, as it keeps a kind new to shared: without a section that
//! names it, the kind is reported as ignored.

#[path = "support/fixtures.rs"]
mod fixtures;

use servbench::jsonl::Source;
use servbench::record::Record;
use summarize::notes::NOTES;
use summarize::notes::note::{Facts, Note, Under};
use summarize::render::{Cell, Column, Format, Table, render};
use summarize::tables::view::View;
use summarize::tables::{SECTIONS, Section, unread};
use summarize::{Config, load_points, tables_with};

/// The note: one function of the facts.
fn points_counted(facts: &Facts) -> Vec<String> {
    vec![format!("{} load points read", facts.points.len())]
}

/// The section: one function of the facts and the view. Its kind here is srv-sim's `sim_plan`,
/// which `input` keeps whole as it would a kind new to shared.
fn layouts_that_fit(facts: &Facts, _view: &View) -> Vec<Table> {
    let plans = facts.inputs.kept(|r| match r {
        Record::SimPlan(p) => Some(p),
        _ => None,
    });
    if plans.is_empty() {
        return Vec::new();
    }
    let column = |name: &str| Column {
        name: name.into(),
        header: name.into(),
    };
    let mut t = Table::new("layouts that fit", vec![column("layout"), column("fits")]);
    for p in plans {
        let fits = if p.fits { "yes" } else { "no" };
        t.push(
            vec![
                Cell::Text(format!("TP={} PP={}", p.tp, p.pp)),
                Cell::Text(fits.into()),
            ],
            0,
        );
    }
    vec![t]
}

/// Two srv-sim `--dry-run` plans of Kimi-K2 NVFP4 on 8 x 96 GB (TP4 does not fit, TP8 does),
/// beside the pipeline fixture's server, points and kill.
fn records(dir: &std::path::Path) -> std::path::PathBuf {
    let mut text = std::fs::read_to_string(fixtures::fixture("pipeline.jsonl")).unwrap();
    for tp in ["4", "8"] {
        let plan = testkit::cmd("srv-sim")
            .args(["--dry-run", "--model", "kimi-k2-nvfp4", "--hardware"])
            .args(["rtx-pro-6000", "--tp", tp])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(plan.status.success(), "{plan:?}");
        text.push_str(&String::from_utf8(plan.stdout).unwrap());
    }
    let path = dir.join("records.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_note_and_a_section_are_each_one_function_and_one_line_in_their_list() {
    let notes: Vec<Note> = [
        NOTES,
        &[Note {
            name: "points_counted",
            under: Under::Points,
            says: points_counted,
        }],
    ]
    .concat();
    // As if `sim_plan` were a kind new to shared: the real sections without the one that reads
    // it, and with the fixture's, one line.
    let real_sections: Vec<Section> = SECTIONS
        .iter()
        .filter(|s| s.name != "srv-sim plans")
        .copied()
        .collect();
    let sections: Vec<Section> = [
        real_sections.as_slice(),
        &[Section {
            name: "layouts that fit",
            kinds: &["sim_plan"],
            tables: layouts_that_fit,
        }],
    ]
    .concat();

    let dir = tempfile::tempdir().unwrap();
    let path = records(dir.path());
    let config = Config {
        sources: vec![Source::File(path)],
        ..Config::default()
    };
    let (inputs, points) = load_points(&config.sources, &config).unwrap();
    let real = tables_with(&inputs, &points, &config, NOTES, &real_sections);
    let extended = tables_with(&inputs, &points, &config, &notes, &sections);

    // Without its section, the kind is read, kept and reported as ignored; with it, it is not.
    let ignored = unread(&inputs.records, &real_sections);
    assert_eq!(
        ignored.into_iter().collect::<Vec<_>>(),
        [("sim_plan".to_string(), 2)]
    );
    assert!(unread(&inputs.records, &sections).is_empty());
    // The report of the records without the section: servers, load points (no notes), kills.
    let titles = |ts: &[Table]| -> Vec<String> { ts.iter().map(|t| t.title.clone()).collect() };
    assert_eq!(titles(&real), ["servers", "load points", "kills"]);
    // The section's table comes last, as its line does.
    assert_eq!(
        titles(&extended),
        ["servers", "load points", "kills", "layouts that fit"]
    );
    assert_eq!(
        extended[3].text(),
        "# layouts that fit\nlayout     fits\nTP=4 PP=1  no\nTP=8 PP=1  yes\n"
    );
    // The note prints under the load points, after the real notes.
    let load_points = &extended[1];
    assert_eq!(
        load_points.notes.last().map(String::as_str),
        Some("2 load points read")
    );
    assert_eq!(
        load_points.notes[..load_points.notes.len() - 1],
        real[1].notes
    );
    // Everything else is the report as it was.
    let mut without_the_note = extended[1].clone();
    without_the_note.notes.pop();
    for (got, want) in [&extended[0], &without_the_note, &extended[2]]
        .into_iter()
        .zip(&real)
    {
        assert_eq!(got.text(), want.text());
    }
    let text = render(&extended, Format::Text);
    assert!(
        text.contains("note: 2 load points read\n\n# kills\n"),
        "{text}"
    );

    // --no-notes leaves the note out, as it does every note.
    let quiet = Config {
        notes: false,
        ..config
    };
    let extended = tables_with(&inputs, &points, &quiet, &notes, &sections);
    assert!(extended[1].notes.is_empty(), "{:?}", extended[1].notes);
}

#[test]
fn the_real_sections_are_named_once_each() {
    for (i, s) in SECTIONS.iter().enumerate() {
        assert!(
            !SECTIONS[..i].iter().any(|m| m.name == s.name),
            "section {} twice",
            s.name
        );
    }
}

/// A list line as the lists and the README write it, `ctor("name", ARG, family::function),`:
/// the constructor and its arguments.
fn list_line(line: &str) -> Option<(&str, Vec<&str>)> {
    let (ctor, rest) = line.trim().split_once('(')?;
    let args = rest.strip_suffix("),")?;
    Some((ctor, args.split(", ").collect()))
}

/// The README's "Adding a note" and "Adding a record kind" show the line to add as the real
/// lists write theirs, and name the file that holds each list: a reader who copies the line
/// into that file adds the note or the section this test file adds above.
#[test]
fn the_readmes_lines_to_add_are_written_as_the_real_lists_lines() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let readme = read("README.md");
    for (heading, ctor, list_file) in [
        ("### Adding a note", "note", "src/notes/mod.rs"),
        ("### Adding a record kind", "section", "src/tables/mod.rs"),
    ] {
        let part = readme
            .split_once(heading)
            .unwrap_or_else(|| panic!("README has no {heading:?}"))
            .1;
        let part = part.split("\n#").next().unwrap();
        assert!(
            part.contains(&format!("`{list_file}`")),
            "{heading}: names {list_file}"
        );
        let shown: Vec<Vec<&str>> = part
            .lines()
            .filter_map(list_line)
            .filter(|(c, _)| *c == ctor)
            .map(|(_, args)| args)
            .collect();
        assert_eq!(shown.len(), 1, "{heading}: one line to add: {shown:?}");
        let source = read(list_file);
        let real: Vec<Vec<&str>> = source
            .lines()
            .filter_map(list_line)
            .filter(|(c, _)| *c == ctor)
            .map(|(_, args)| args)
            .collect();
        assert!(real.len() >= 5, "{list_file}: {real:?}");
        // Every line: a quoted name, what it is under or reads, a family::function.
        let shaped = |args: &[&str]| {
            args.len() == 3
                && args[0].starts_with('"')
                && args[0].ends_with('"')
                && args[2].split("::").count() == 2
        };
        for args in real.iter().chain(&shown) {
            assert!(shaped(args), "{list_file} or README: {args:?}");
        }
        // The middle argument as the real lines write it: a note's `Under::` place (one the
        // list uses), a section's kinds `&[...::KIND]`.
        let middle = shown[0][1];
        match ctor {
            "note" => assert!(real.iter().any(|a| a[1] == middle), "{middle}"),
            _ => {
                let kinds = |m: &str| m.starts_with("&[") && m.ends_with("::KIND]");
                assert!(kinds(middle), "{middle}");
                assert!(real.iter().any(|a| kinds(a[1])));
            }
        }
    }
}
