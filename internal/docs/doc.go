// Package docs holds no code: its tests keep the Markdown manual (README.md,
// docs/*.md, docs/design/*.md, docs/adr/*.md, CHANGELOG.md,
// infra/README.md, localstack/README.md, examples/README.md) whole. Every
// relative link names a file that exists, and an anchor a heading of it;
// every reference to a section written as a file and a quoted heading
// (`docs/cli.md "Results lines"`, `README "Two commands"`,
// `docs/design/items.md "Pause on an outage"`, or a link to the page
// followed by the heading), in the docs or in the code's comments and
// messages, names a heading that exists; the README stays a front page
// that links every page of docs/. The design stays an overview
// (docs/design.md at most 300 lines, linking every page of docs/design/):
// its module map says what each package imports, and every test its
// invariants table, its pages and the decision records cite exists. Every
// decision record is named, numbered, shaped and listed in
// docs/adr/README.md.
package docs
