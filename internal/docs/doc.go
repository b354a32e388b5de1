// Package docs holds no code: its tests keep the Markdown manual (README.md,
// docs/*.md, infra/README.md, localstack/README.md, examples/README.md)
// whole. Every relative link names a file that exists, and an anchor a
// heading of it; every reference to a section written as a file and a
// quoted heading (`docs/cli.md "Results lines"`, `README "Two commands"`),
// in the docs or in the code's comments and messages, names a heading that
// exists; the README stays a front page that links every page of docs/.
package docs
