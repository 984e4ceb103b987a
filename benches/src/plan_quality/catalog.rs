//! The catalog `ctx-bench plan-quality` plans from: about 270 skills, subagents, MCP servers and
//! harnesses in the shapes of the collections people actually install, every name, description
//! and keyword written for this bench.
//!
//! An entry's label is its description, as `ctx catalog build` makes it (spec/catalog-build.md
//! §2.4), and its tags are the name's hyphen-separated tokens plus the entry's keywords, so the
//! labels carry the ordinary words real descriptions carry ("with", "data", "service", "fix",
//! "module") and the tags the generic name tokens real names carry ("data", "review", "test").

/// How an entry reaches a host (spec/catalog.md §1.2, §1.4, §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A skill whose `SKILL.md` is its `material`: loaded with no decision, so it must derive
    /// neither flag.
    Load,
    /// A skill installed as one `SKILL.md` whose `allowed-tools` pre-approve `tools`
    /// (permissions expand); `credential` when those commands need a personal login.
    Install {
        tools: &'static str,
        credential: bool,
    },
    /// A skill directory with an executable helper at `script` and a reference file, installed
    /// as a tree (an executable expands permissions, spec/catalog.md §1.4).
    Tree { script: &'static str },
    /// A subagent file installed into the host; `edits` gives it `permissionMode: acceptEdits`.
    Agent { edits: bool },
    /// A stdio MCP server started with `npx`; each of `env` becomes a `${VAR}` reference.
    McpStdio {
        package: &'static str,
        env: &'static [&'static str],
    },
    /// A remote MCP server; `token` names the variable of its bearer header.
    McpHttp {
        url: &'static str,
        token: Option<&'static str>,
    },
    /// Neither material nor install: the person sets it up or acts themselves.
    Manual,
}

/// One catalog entry as written here.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub id: &'static str,
    /// The frontmatter description and the catalog label (at most 200 bytes).
    pub description: &'static str,
    /// Tags besides the name's own tokens.
    pub keywords: &'static [&'static str],
    pub shape: Shape,
}

impl Entry {
    /// `skill`, `agent`, `mcp-server` or `harness`.
    pub fn kind(&self) -> &'static str {
        self.id.split_once(':').map_or("", |(kind, _)| kind)
    }

    pub fn name(&self) -> &'static str {
        self.id.split_once(':').map_or(self.id, |(_, name)| name)
    }

    /// The sorted, unique tags: the name's hyphen-separated tokens and the keywords.
    pub fn tags(&self) -> Vec<String> {
        let mut tags: Vec<String> = self
            .name()
            .split('-')
            .chain(self.keywords.iter().copied())
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        tags.sort();
        tags.dedup();
        tags
    }

    /// `load`, `install` or `manual` (spec/catalog.md §5.3).
    pub fn actionability(&self) -> &'static str {
        match self.shape {
            Shape::Load => "load",
            Shape::Manual => "manual",
            _ => "install",
        }
    }
}

const fn load(
    id: &'static str,
    description: &'static str,
    keywords: &'static [&'static str],
) -> Entry {
    Entry {
        id,
        description,
        keywords,
        shape: Shape::Load,
    }
}

const fn install(
    id: &'static str,
    description: &'static str,
    keywords: &'static [&'static str],
    tools: &'static str,
    credential: bool,
) -> Entry {
    Entry {
        id,
        description,
        keywords,
        shape: Shape::Install { tools, credential },
    }
}

const fn tree(
    id: &'static str,
    description: &'static str,
    keywords: &'static [&'static str],
    script: &'static str,
) -> Entry {
    Entry {
        id,
        description,
        keywords,
        shape: Shape::Tree { script },
    }
}

const fn agent(
    id: &'static str,
    description: &'static str,
    keywords: &'static [&'static str],
) -> Entry {
    Entry {
        id,
        description,
        keywords,
        shape: Shape::Agent { edits: false },
    }
}

const fn editing_agent(
    id: &'static str,
    description: &'static str,
    keywords: &'static [&'static str],
) -> Entry {
    Entry {
        id,
        description,
        keywords,
        shape: Shape::Agent { edits: true },
    }
}

const fn stdio(
    id: &'static str,
    description: &'static str,
    keywords: &'static [&'static str],
    package: &'static str,
    env: &'static [&'static str],
) -> Entry {
    Entry {
        id,
        description,
        keywords,
        shape: Shape::McpStdio { package, env },
    }
}

const fn remote(
    id: &'static str,
    description: &'static str,
    keywords: &'static [&'static str],
    url: &'static str,
    token: Option<&'static str>,
) -> Entry {
    Entry {
        id,
        description,
        keywords,
        shape: Shape::McpHttp { url, token },
    }
}

const fn manual(
    id: &'static str,
    description: &'static str,
    keywords: &'static [&'static str],
) -> Entry {
    Entry {
        id,
        description,
        keywords,
        shape: Shape::Manual,
    }
}

/// Every entry, grouped as a person would browse them.
pub const ENTRIES: &[Entry] = &[
    // --- Documents ------------------------------------------------------------------------------
    tree(
        "skill:pdf",
        "Extract text and tables from PDF files, fill in forms, merge, split or rotate pages and OCR scanned pages. Use when the task involves reading or producing a .pdf document.",
        &["documents", "forms", "ocr", "tables"],
        "scripts/extract_tables.py",
    ),
    tree(
        "skill:docx",
        "Create and edit Word documents with headings, tables, comments and tracked changes. Use when the user works with .docx files or asks for a report in Word format.",
        &["documents", "office", "word"],
        "scripts/docx_tool.py",
    ),
    tree(
        "skill:xlsx",
        "Build, clean and recalculate Excel workbooks: formulas, pivot tables, charts and number formats. Use when reading or writing .xlsx spreadsheets.",
        &["excel", "office", "spreadsheets", "formulas"],
        "scripts/recalc.py",
    ),
    tree(
        "skill:pptx",
        "Create and modify PowerPoint decks: layouts, slide masters, speaker notes and charts. Use when the user wants slides or a .pptx presentation.",
        &["office", "powerpoint", "presentations", "slides"],
        "scripts/build_deck.py",
    ),
    load(
        "skill:csv-cleaning",
        "Clean messy CSV exports: detect encodings and delimiters, fix quoting, normalize dates and drop duplicate rows. Use when a CSV file fails to import or has inconsistent data.",
        &["csv", "data-cleaning", "encoding"],
    ),
    load(
        "skill:markdown-to-html",
        "Render Markdown documents to styled HTML with a table of contents, code highlighting and anchors. Use when publishing Markdown notes or docs as a static page.",
        &["html", "markdown", "static-site"],
    ),
    load(
        "skill:invoice-generator",
        "Generate invoices and receipts from order data with line items, taxes and totals, as HTML or PDF. Use when building billing documents for customers.",
        &["billing", "invoices", "receipts"],
    ),
    // --- Testing --------------------------------------------------------------------------------
    install(
        "skill:playwright-e2e",
        "Write and run Playwright end-to-end tests: page objects, locators, fixtures, traces and retries. Use when adding e2e browser tests or debugging a failing Playwright spec.",
        &["browser", "e2e", "testing", "typescript"],
        "Bash(npx playwright test *) Bash(npx playwright show-trace *)",
        false,
    ),
    load(
        "skill:cypress-testing",
        "Cypress component and end-to-end tests with custom commands, intercepts and stable selectors. Use when a project already uses Cypress for UI tests.",
        &["browser", "cypress", "e2e", "frontend"],
    ),
    load(
        "skill:pytest",
        "Python tests with pytest: fixtures, parametrize, monkeypatch, markers and coverage. Use when writing or fixing Python unit tests.",
        &["coverage", "python", "testing", "unit-tests"],
    ),
    load(
        "skill:flaky-test-triage",
        "Find why a test passes locally and fails in CI: ordering, timing, shared state, network and time zones. Use when a test is flaky or intermittently red.",
        &["ci", "flaky", "intermittent", "testing"],
    ),
    load(
        "skill:jest",
        "JavaScript and TypeScript unit tests with Jest: mocks, timers, snapshots and module mocking. Use when writing or debugging Jest test suites.",
        &[
            "javascript",
            "mocking",
            "testing",
            "typescript",
            "unit-tests",
        ],
    ),
    load(
        "skill:vitest",
        "Fast unit tests for Vite projects with Vitest: in-source tests, mocks and coverage. Use when a Vite or Vue project needs tests.",
        &["javascript", "testing", "typescript", "vite"],
    ),
    load(
        "skill:rust-tests",
        "Rust unit, integration and doc tests with cargo test and nextest, including test helpers and fixtures. Use when adding or fixing tests in a Rust crate.",
        &["cargo", "integration-tests", "nextest", "rust", "testing"],
    ),
    load(
        "skill:go-table-tests",
        "Table-driven Go tests with subtests, t.Helper, fakes and golden files. Use when writing tests for a Go package.",
        &["go", "golang", "testing", "unit-tests"],
    ),
    load(
        "skill:property-based-testing",
        "Property-based tests with Hypothesis, proptest or fast-check: generators, shrinking and invariants. Use when example-based tests miss edge cases.",
        &["fuzzing", "hypothesis", "proptest", "testing"],
    ),
    load(
        "skill:snapshot-testing",
        "Snapshot and golden-file tests: when to use them, how to review updates and keep them small. Use when output is large and stable, like rendered HTML or CLI text.",
        &["golden-files", "insta", "testing"],
    ),
    install(
        "skill:load-testing",
        "Load and stress tests with k6: scenarios, ramping virtual users, thresholds and result analysis. Use when checking how an endpoint behaves under traffic.",
        &["k6", "performance", "stress", "throughput"],
        "Bash(k6 run *)",
        false,
    ),
    load(
        "skill:contract-testing",
        "Consumer-driven contract tests with Pact between a client and a provider service. Use when two teams change an API independently and need to catch breaking changes.",
        &["api", "pact", "testing"],
    ),
    load(
        "skill:test-driven-development",
        "Red, green, refactor: write the failing test first, make it pass with the smallest change, then clean up. Use when implementing a feature test-first.",
        &["tdd", "testing"],
    ),
    load(
        "skill:mutation-testing",
        "Mutation testing with Stryker, mutmut or cargo-mutants to find tests that assert nothing. Use when coverage is high but bugs still slip through.",
        &["mutants", "stryker", "testing"],
    ),
    load(
        "skill:test-coverage",
        "Measure and read test coverage reports (lcov, coverage.py, llvm-cov) and pick the gaps worth covering. Use when asked to raise coverage or find untested code.",
        &["coverage", "lcov", "testing"],
    ),
    load(
        "skill:visual-regression",
        "Screenshot comparison tests for UI components with per-pixel thresholds and baseline review. Use when CSS changes keep breaking layouts unnoticed.",
        &["css", "screenshots", "testing", "ui"],
    ),
    load(
        "skill:api-testing",
        "HTTP API tests with request collections, schema assertions and environment variables. Use when testing REST endpoints end to end.",
        &["http", "postman", "rest", "testing"],
    ),
    // --- Infrastructure and delivery ------------------------------------------------------------
    install(
        "skill:terraform",
        "Write and review Terraform: modules, variables, state, workspaces and reading a plan before apply. Use when changing infrastructure as code.",
        &["iac", "infrastructure", "opentofu"],
        "Bash(terraform fmt *) Bash(terraform validate *) Bash(terraform plan *)",
        false,
    ),
    load(
        "skill:helm-charts",
        "Author Helm charts: templates, values files, helpers, chart tests and upgrades. Use when packaging a service for Kubernetes with Helm.",
        &["charts", "helm", "k8s", "kubernetes"],
    ),
    load(
        "skill:kubernetes-manifests",
        "Kubernetes Deployments, Services, Ingress, ConfigMaps, probes and resource limits done right. Use when writing or reviewing k8s YAML.",
        &["deployment", "k8s", "yaml"],
    ),
    install(
        "skill:kubectl-debugging",
        "Troubleshoot pods with kubectl: CrashLoopBackOff, pending pods, failed probes, events and logs. Use when a workload in the cluster is unhealthy.",
        &["crashloop", "k8s", "kubernetes", "pods"],
        "Bash(kubectl get *) Bash(kubectl describe *) Bash(kubectl logs *)",
        false,
    ),
    load(
        "skill:dockerfile",
        "Small, cached and secure Dockerfiles: multi-stage builds, non-root users, pinned bases and .dockerignore. Use when writing or slimming a container image.",
        &["containers", "docker", "images"],
    ),
    load(
        "skill:docker-compose",
        "Local development stacks with Docker Compose: services, volumes, healthchecks, profiles and env files. Use when wiring several containers together for dev.",
        &["compose", "containers", "local-dev"],
    ),
    load(
        "skill:ansible-playbooks",
        "Ansible playbooks and roles: inventories, idempotent tasks, handlers and vault-encrypted vars. Use when configuring servers with Ansible.",
        &["ansible", "configuration", "servers"],
    ),
    install(
        "skill:aws-cdk",
        "Define AWS infrastructure with the CDK in TypeScript or Python: stacks, constructs, diff and deploy. Use when the project keeps its AWS resources in CDK code.",
        &["aws", "cloud", "iac", "infrastructure"],
        "Bash(npx cdk diff *) Bash(aws sts get-caller-identity)",
        true,
    ),
    load(
        "skill:cloudformation",
        "AWS CloudFormation templates: parameters, outputs, nested stacks, change sets and drift. Use when editing CloudFormation YAML or JSON.",
        &["aws", "iac", "templates"],
    ),
    install(
        "skill:gcp-cloud-run",
        "Deploy containers to Google Cloud Run: service config, revisions, traffic splitting and secrets. Use when shipping a service on GCP serverless.",
        &["cloud", "deploy", "gcp", "serverless"],
        "Bash(gcloud run deploy *) Bash(gcloud run services describe *)",
        true,
    ),
    load(
        "skill:nginx-config",
        "Nginx as a reverse proxy: server blocks, upstreams, TLS, caching headers and rate limits. Use when configuring or debugging an nginx config.",
        &["proxy", "tls", "web-server"],
    ),
    load(
        "skill:systemd-units",
        "Write systemd service and timer units with restarts, sandboxing and journald logging. Use when running a daemon on a Linux host.",
        &["daemon", "linux", "timers"],
    ),
    load(
        "skill:github-actions",
        "GitHub Actions workflows: jobs, matrices, caching, reusable workflows, secrets and debugging failed runs. Use when editing .github/workflows or fixing a red pipeline.",
        &["ci", "pipelines", "workflows", "yaml"],
    ),
    load(
        "skill:gitlab-ci",
        "GitLab CI pipelines: stages, rules, artifacts, caches and child pipelines. Use when editing .gitlab-ci.yml.",
        &["ci", "gitlab", "pipelines", "yaml"],
    ),
    load(
        "skill:ci-caching",
        "Speed up CI with dependency and build caches, test splitting and skipping unchanged packages. Use when the pipeline is slow.",
        &["caching", "ci", "pipelines", "speed"],
    ),
    load(
        "skill:argocd-gitops",
        "GitOps delivery with Argo CD: applications, sync waves, health checks and rollbacks. Use when deployments flow from a Git repository to a cluster.",
        &["argo", "deploy", "gitops", "kubernetes"],
    ),
    load(
        "skill:prometheus-alerts",
        "Prometheus metrics and alerting rules: PromQL, recording rules, SLO burn rates and Alertmanager routes. Use when adding metrics or alerts.",
        &["alerting", "metrics", "monitoring", "promql"],
    ),
    load(
        "skill:grafana-dashboards",
        "Grafana dashboards as code: panels, variables, provisioning and useful RED and USE layouts. Use when building or fixing a dashboard.",
        &["dashboards", "monitoring", "observability"],
    ),
    load(
        "skill:opentelemetry",
        "Instrument services with OpenTelemetry: traces, spans, context propagation, metrics and exporters. Use when adding distributed tracing.",
        &["observability", "otel", "spans", "tracing"],
    ),
    load(
        "skill:structured-logging",
        "Structured JSON logs with levels, correlation ids and no secrets, for any language. Use when logs are unreadable, too noisy or miss the request id.",
        &["json", "logs", "observability"],
    ),
    load(
        "skill:incident-postmortem",
        "Write a blameless postmortem: timeline, impact, contributing factors and action items. Use after an outage or a customer-facing incident.",
        &["incidents", "outage", "postmortem", "sre"],
    ),
    load(
        "skill:runbook-writing",
        "Write on-call runbooks with symptoms, dashboards, commands and escalation steps. Use when an alert has no documented response.",
        &["on-call", "operations", "runbooks", "sre"],
    ),
    load(
        "skill:tls-certificates",
        "TLS certificates: issuing with ACME, renewing, chains, SANs and debugging handshake errors. Use when HTTPS breaks or a certificate expires.",
        &["acme", "certificates", "https", "tls"],
    ),
    load(
        "skill:bash-scripting",
        "Robust shell scripts: set -euo pipefail, quoting, traps, argument parsing and shellcheck clean. Use when writing or fixing a bash script.",
        &["bash", "scripts", "shell", "shellcheck"],
    ),
    load(
        "skill:makefile",
        "Makefiles that stay readable: phony targets, pattern rules, variables and a help target. Use when adding build or task automation with make.",
        &["build", "make"],
    ),
    load(
        "skill:nix-flakes",
        "Reproducible dev shells and builds with Nix flakes: inputs, overlays, devShells and pinning. Use when the repository has a flake.nix.",
        &["nix", "reproducible"],
    ),
    load(
        "skill:bazel-build",
        "Bazel BUILD files, rules, visibility, remote caching and query. Use when targets fail to build or a new package needs rules.",
        &["bazel", "build", "monorepo"],
    ),
    load(
        "skill:cmake",
        "Modern CMake for C and C++: targets, find_package, presets and toolchains. Use when a CMakeLists.txt needs changes.",
        &["build", "c", "cpp"],
    ),
    load(
        "skill:cloud-cost-review",
        "Find waste in a cloud bill: idle instances, oversized databases, egress and missing lifecycle rules. Use when infrastructure costs jump.",
        &["aws", "billing", "cloud", "finops"],
    ),
    load(
        "skill:blue-green-deploys",
        "Zero-downtime releases with blue-green and canary rollouts, health gates and fast rollback. Use when planning how a service change reaches production.",
        &["canary", "deploy", "rollback", "rollout"],
    ),
    // --- Databases and data stores --------------------------------------------------------------
    load(
        "skill:postgres-migrations",
        "Safe PostgreSQL schema migrations: adding columns and indexes without locks, backfills and rollbacks. Use when writing a migration for a Postgres database.",
        &["database", "migrations", "postgres", "schema", "sql"],
    ),
    load(
        "skill:sql-tuning",
        "Speed up slow SQL: EXPLAIN ANALYZE, indexes, join order, N+1 queries and statistics. Use when a query or page is slow because of the database.",
        &["database", "explain", "indexes", "performance", "sql"],
    ),
    load(
        "skill:prisma-schema",
        "Prisma schema modelling, relations, migrations and typed queries in TypeScript. Use when the project uses Prisma as its ORM.",
        &["database", "orm", "prisma", "typescript"],
    ),
    load(
        "skill:alembic-migrations",
        "SQLAlchemy models and Alembic migrations: autogenerate, review, data migrations and downgrades. Use when a Python app changes its database schema.",
        &["alembic", "database", "migrations", "python", "sqlalchemy"],
    ),
    load(
        "skill:redis-caching",
        "Redis for caching, rate limits, locks and queues: key design, TTLs, eviction and pitfalls. Use when adding a cache or debugging stale data in Redis.",
        &["cache", "caching", "redis"],
    ),
    load(
        "skill:mongodb",
        "MongoDB document modelling, aggregation pipelines, indexes and schema validation. Use when working with a Mongo collection.",
        &["database", "documents", "mongo", "nosql"],
    ),
    load(
        "skill:elasticsearch-queries",
        "Elasticsearch and OpenSearch: mappings, analyzers, bool queries, aggregations and relevance tuning. Use when search results are wrong or slow.",
        &["elasticsearch", "opensearch", "search"],
    ),
    load(
        "skill:dbt-models",
        "dbt models, sources, tests and incremental materializations for the analytics warehouse. Use when transforming warehouse tables with dbt.",
        &["analytics", "dbt", "sql", "warehouse"],
    ),
    load(
        "skill:sqlite",
        "SQLite in applications: WAL mode, pragmas, migrations, full-text search and concurrency limits. Use when an app embeds SQLite.",
        &["database", "embedded", "sql"],
    ),
    load(
        "skill:kafka-streams",
        "Kafka producers, consumers, partitions, consumer groups and exactly-once pitfalls. Use when building or debugging event streaming with Kafka.",
        &["events", "kafka", "messaging", "streaming"],
    ),
    manual(
        "skill:database-restore",
        "Restore a production database from a snapshot or point-in-time backup; a DBA with console access performs it. Use when data was lost or corrupted.",
        &["backup", "database", "dba", "recovery"],
    ),
    load(
        "skill:graphql-schema",
        "GraphQL schema design, resolvers, dataloaders, pagination and error handling. Use when adding types or fixing N+1 resolvers.",
        &["api", "graphql", "resolvers"],
    ),
    // --- Frontend and mobile --------------------------------------------------------------------
    load(
        "skill:react-components",
        "React function components with hooks, props typing, composition and accessible markup. Use when building or refactoring React UI components.",
        &["frontend", "hooks", "jsx", "react", "typescript"],
    ),
    load(
        "skill:nextjs-app-router",
        "Next.js App Router: server components, route handlers, caching, metadata and middleware. Use when building pages or API routes in Next.js.",
        &["frontend", "nextjs", "react", "ssr"],
    ),
    load(
        "skill:vue-components",
        "Vue 3 single-file components with the Composition API, Pinia stores and typed props. Use when working on a Vue frontend.",
        &["frontend", "pinia", "vue"],
    ),
    load(
        "skill:svelte",
        "Svelte and SvelteKit: components, stores, load functions and form actions. Use when the frontend is written in Svelte.",
        &["frontend", "sveltekit"],
    ),
    load(
        "skill:angular",
        "Angular components, services, signals, RxJS and dependency injection. Use when changing an Angular app.",
        &["frontend", "rxjs", "typescript"],
    ),
    load(
        "skill:tailwind-css",
        "Tailwind CSS utility classes, theme config, responsive variants and component extraction. Use when styling with Tailwind.",
        &["css", "frontend", "styling"],
    ),
    load(
        "skill:css-layout",
        "CSS layout with flexbox and grid, responsive breakpoints, and fixing overflow and alignment bugs. Use when a page layout breaks on some screen sizes.",
        &["css", "flexbox", "frontend", "grid", "responsive"],
    ),
    load(
        "skill:accessibility-audit",
        "Audit web UI against WCAG: semantics, ARIA, keyboard navigation, focus order and color contrast. Use when checking or fixing accessibility.",
        &["a11y", "aria", "frontend", "wcag"],
    ),
    load(
        "skill:i18n-localization",
        "Internationalize an app: message catalogs, ICU plurals, locale formatting of dates and numbers, and right-to-left layouts. Use when adding languages or translations.",
        &["i18n", "l10n", "locales", "translations"],
    ),
    load(
        "skill:state-management",
        "Client state with Redux Toolkit, Zustand or React Query: what belongs where and how to avoid stale caches. Use when frontend state gets tangled.",
        &["frontend", "react", "redux", "zustand"],
    ),
    load(
        "skill:react-native",
        "React Native apps: navigation, native modules, platform differences and performance. Use when building a mobile app with React Native.",
        &["android", "ios", "mobile", "react"],
    ),
    load(
        "skill:flutter",
        "Flutter widgets, state, platform channels and Dart null safety. Use when working on a Flutter mobile app.",
        &["dart", "mobile", "widgets"],
    ),
    load(
        "skill:swiftui",
        "SwiftUI views, state and bindings, navigation stacks and previews. Use when building iOS or macOS screens in SwiftUI.",
        &["ios", "macos", "mobile", "swift"],
    ),
    load(
        "skill:jetpack-compose",
        "Android UI with Jetpack Compose: composables, state hoisting, navigation and theming in Kotlin. Use when working on an Android app.",
        &["android", "kotlin", "mobile"],
    ),
    load(
        "skill:web-performance",
        "Improve Core Web Vitals: bundle size, lazy loading, image formats, render-blocking resources and Lighthouse audits. Use when a web page loads slowly.",
        &["frontend", "lighthouse", "performance", "web-vitals"],
    ),
    load(
        "skill:storybook",
        "Storybook stories, controls, interaction tests and docs for a component library. Use when documenting or testing UI components in isolation.",
        &["components", "frontend", "ui"],
    ),
    load(
        "skill:seo-metadata",
        "SEO basics for web apps: titles, meta descriptions, Open Graph tags, sitemaps, canonical URLs and structured data. Use when pages do not show up well in search.",
        &["frontend", "meta-tags", "search", "sitemap"],
    ),
    load(
        "skill:form-validation",
        "Client and server form validation with schemas (zod, yup), error messages and accessible error states. Use when building forms.",
        &["forms", "frontend", "validation", "zod"],
    ),
    load(
        "skill:vite-config",
        "Vite and webpack build configuration: aliases, env variables, code splitting, plugins and dev proxy. Use when the frontend build or dev server misbehaves.",
        &["build", "bundler", "frontend", "vite", "webpack"],
    ),
    load(
        "skill:service-worker-pwa",
        "Progressive web apps: service workers, offline caching strategies, manifest and install prompts. Use when an app must work offline.",
        &["frontend", "offline", "pwa"],
    ),
    manual(
        "skill:app-store-release",
        "Submit an iOS or Android build for store review: screenshots, privacy labels, release notes and phased rollout. The account holder submits in the store console.",
        &[
            "android",
            "app-store",
            "ios",
            "mobile",
            "play-store",
            "release",
        ],
    ),
    manual(
        "skill:design-handoff",
        "Turn a designer's mockups into implementation tickets with spacing, tokens and states; the designer signs off on the result. Use when a new screen design arrives.",
        &["design", "figma", "frontend", "ui"],
    ),
    // --- Languages and backend ------------------------------------------------------------------
    install(
        "skill:rust-clippy",
        "Run cargo clippy, check and fmt with pre-approved commands and fix every warning. Use when clippy or rustfmt fails or before committing Rust code.",
        &["cargo", "lint", "rust", "rustfmt"],
        "Bash(cargo clippy *) Bash(cargo check *) Bash(cargo fmt *)",
        false,
    ),
    load(
        "skill:rust-async",
        "Async Rust with tokio: tasks, select, cancellation, blocking work and Send bounds. Use when async Rust code hangs, deadlocks or fails to compile.",
        &["async", "concurrency", "rust", "tokio"],
    ),
    load(
        "skill:rust-error-handling",
        "Rust error types with thiserror and anyhow, the question mark operator and error context. Use when designing errors for a Rust library or binary.",
        &["anyhow", "errors", "rust", "thiserror"],
    ),
    load(
        "skill:unsafe-rust-review",
        "Review unsafe Rust: invariants, aliasing, FFI boundaries and Miri. Use when a change adds or touches an unsafe block.",
        &["ffi", "miri", "rust", "unsafe"],
    ),
    load(
        "skill:python-packaging",
        "Package Python projects with pyproject.toml, uv or poetry, entry points and wheels. Use when publishing a library or fixing dependency resolution.",
        &["packaging", "poetry", "pyproject", "python", "uv"],
    ),
    load(
        "skill:python-typing",
        "Type hints for Python with mypy or pyright: generics, protocols, TypedDict and gradual adoption. Use when adding types or fixing type-checker errors.",
        &["mypy", "pyright", "python", "types"],
    ),
    load(
        "skill:fastapi",
        "FastAPI services: routers, Pydantic models, dependencies, background tasks and OpenAPI docs. Use when building a Python HTTP API with FastAPI.",
        &["api", "pydantic", "python"],
    ),
    load(
        "skill:django",
        "Django models, views, the ORM, admin, migrations and settings per environment. Use when working in a Django project.",
        &["orm", "python", "web"],
    ),
    load(
        "skill:flask",
        "Flask apps with blueprints, application factories, extensions and request context. Use when changing a Flask service.",
        &["python", "web"],
    ),
    load(
        "skill:celery-tasks",
        "Celery tasks, retries, idempotency, beat schedules and worker tuning. Use when background jobs in a Python app misbehave.",
        &["background-jobs", "python", "queues", "workers"],
    ),
    load(
        "skill:go-concurrency",
        "Go goroutines, channels, context cancellation, errgroup and the race detector. Use when Go code leaks goroutines or has data races.",
        &["channels", "concurrency", "go", "goroutines"],
    ),
    load(
        "skill:go-modules",
        "Go modules: versioning, replace directives, workspaces, vendoring and upgrading dependencies. Use when go.mod or go.sum is in trouble.",
        &["dependencies", "go", "golang"],
    ),
    load(
        "skill:spring-boot",
        "Spring Boot services in Java or Kotlin: configuration, beans, JPA, actuator and tests. Use when changing a Spring application.",
        &["java", "jpa", "kotlin", "spring"],
    ),
    load(
        "skill:kotlin-coroutines",
        "Kotlin coroutines and Flow: scopes, dispatchers, structured concurrency and cancellation. Use when Kotlin async code misbehaves.",
        &["async", "concurrency", "kotlin"],
    ),
    load(
        "skill:typescript-strict",
        "Turn on strict TypeScript and fix what it finds: unions, narrowing, generics and any-free APIs. Use when tightening a TypeScript codebase.",
        &["javascript", "tsconfig", "types", "typescript"],
    ),
    load(
        "skill:node-express",
        "Node.js HTTP services with Express or Fastify: middleware, error handlers, validation and graceful shutdown. Use when building a Node backend.",
        &["api", "express", "javascript", "node"],
    ),
    load(
        "skill:rails",
        "Ruby on Rails: models, migrations, controllers, background jobs and RSpec. Use when working in a Rails app.",
        &["rspec", "ruby", "web"],
    ),
    load(
        "skill:laravel",
        "Laravel in PHP: Eloquent models, migrations, queues, policies and Pest tests. Use when changing a Laravel application.",
        &["eloquent", "php", "web"],
    ),
    load(
        "skill:dotnet-aspnet",
        "ASP.NET Core in C#: minimal APIs, dependency injection, Entity Framework and configuration. Use when working on a .NET web service.",
        &["aspnet", "csharp", "dotnet", "entity-framework"],
    ),
    load(
        "skill:cpp-sanitizers",
        "Find memory and undefined-behaviour bugs in C and C++ with AddressSanitizer, UBSan, TSan and valgrind. Use when native code crashes or corrupts memory.",
        &["asan", "c", "cpp", "memory", "valgrind"],
    ),
    load(
        "skill:webassembly",
        "Compile Rust or C to WebAssembly, bind it to JavaScript and keep the bundle small. Use when moving hot code into wasm.",
        &["javascript", "rust", "wasm"],
    ),
    load(
        "skill:elixir-phoenix",
        "Elixir and Phoenix: contexts, LiveView, Ecto schemas and OTP supervision. Use when working in an Elixir codebase.",
        &["ecto", "elixir", "liveview", "otp"],
    ),
    load(
        "skill:regex",
        "Write, explain and test regular expressions, avoid catastrophic backtracking and pick the right flavor. Use when a regex does not match what it should.",
        &["parsing", "patterns", "regular-expressions"],
    ),
    load(
        "skill:json-schema",
        "JSON Schema for validating configs and payloads: types, required fields, refs and versioned schemas. Use when a JSON document needs a schema.",
        &["json", "schema", "validation"],
    ),
    load(
        "skill:protobuf-grpc",
        "Protocol Buffers and gRPC: message design, field numbering, streaming RPCs and backwards compatibility. Use when defining or changing .proto files.",
        &["grpc", "proto", "protobuf", "rpc"],
    ),
    load(
        "skill:openapi-spec",
        "Write and lint OpenAPI 3 specs, generate clients and keep the spec in sync with the code. Use when documenting an HTTP API or generating an SDK.",
        &["api", "openapi", "sdk", "swagger"],
    ),
    load(
        "skill:rest-api-design",
        "REST API design: resources, status codes, pagination, filtering, idempotency keys and error bodies. Use when designing or reviewing a new HTTP API.",
        &["api", "design", "http", "rest"],
    ),
    load(
        "skill:api-versioning",
        "Version and deprecate public APIs without breaking clients: headers, URL versions, sunset notices. Use when an API change would break consumers.",
        &["api", "deprecation", "versioning"],
    ),
    load(
        "skill:rate-limiting",
        "Rate limiting and throttling: token buckets, sliding windows, per-tenant quotas and 429 responses. Use when an endpoint needs abuse protection.",
        &["api", "quotas", "throttling"],
    ),
    load(
        "skill:webhooks",
        "Send and receive webhooks reliably: signatures, retries with backoff, idempotency and replay. Use when integrating webhook events from or to another system.",
        &["events", "http", "integrations", "signatures"],
    ),
    load(
        "skill:oauth-login",
        "OAuth 2.0 and OpenID Connect login: authorization code with PKCE, scopes, refresh tokens and provider setup. Use when adding sign-in with Google, GitHub or another provider.",
        &["auth", "login", "oauth", "oidc", "sso"],
    ),
    load(
        "skill:jwt-sessions",
        "Sessions and JWTs: signing, expiry, rotation, revocation, cookies versus headers. Use when implementing or reviewing authentication tokens.",
        &["auth", "cookies", "jwt", "sessions", "tokens"],
    ),
    install(
        "skill:stripe-payments",
        "Integrate Stripe payments: Checkout, Payment Intents, subscriptions, webhooks and test clocks with the Stripe CLI. Use when adding or debugging payments.",
        &["billing", "checkout", "payments", "stripe", "subscriptions"],
        "Bash(stripe listen *) Bash(stripe trigger *)",
        true,
    ),
    load(
        "skill:billing-subscriptions",
        "Subscription billing logic: plans, proration, trials, dunning and invoices, independent of the payment provider. Use when modelling pricing in code.",
        &["billing", "invoices", "pricing", "subscriptions"],
    ),
    load(
        "skill:email-sending",
        "Transactional email: templates, SMTP or provider APIs, SPF, DKIM and DMARC, bounces and previews. Use when the app must send email.",
        &["dkim", "email", "smtp", "templates"],
    ),
    install(
        "skill:sms-notifications",
        "Send SMS and voice notifications through Twilio with status callbacks and opt-out handling. Use when the product needs text messages.",
        &["notifications", "sms", "twilio"],
        "Bash(curl -u $TWILIO_AUTH_TOKEN *)",
        true,
    ),
    load(
        "skill:file-uploads",
        "File uploads to S3-compatible storage: presigned URLs, multipart uploads, size limits and virus scanning. Use when users upload files.",
        &["s3", "storage", "uploads"],
    ),
    load(
        "skill:image-processing",
        "Resize, crop, convert and optimize images with sharp, Pillow or libvips, and generate thumbnails. Use when handling user images.",
        &["images", "pillow", "sharp", "thumbnails"],
    ),
    load(
        "skill:video-transcoding",
        "Transcode and package video with ffmpeg: codecs, bitrates, HLS segments and thumbnails. Use when the app processes video files.",
        &["ffmpeg", "hls", "media", "video"],
    ),
    load(
        "skill:background-jobs",
        "Background job queues (Sidekiq, BullMQ, RQ): retries, dead letters, idempotent handlers and scheduling. Use when work must run outside the request.",
        &["jobs", "queues", "workers"],
    ),
    load(
        "skill:cron-scheduling",
        "Cron expressions and scheduled jobs: time zones, overlap locks, missed runs and monitoring. Use when something must run on a schedule.",
        &["cron", "jobs", "schedule"],
    ),
    load(
        "skill:feature-flags",
        "Feature flags: rollout percentages, targeting, kill switches and cleaning up stale flags. Use when a change must ship dark or be toggled.",
        &["flags", "rollout", "toggles"],
    ),
    load(
        "skill:caching-strategies",
        "Caching strategies: cache-aside, write-through, invalidation, TTLs and HTTP cache headers. Use when deciding what to cache and how to keep it fresh.",
        &["cache", "caching", "http", "invalidation"],
    ),
    load(
        "skill:websockets",
        "Real-time features with WebSockets or server-sent events: connection lifecycle, reconnects, auth and scaling. Use when adding live updates.",
        &["realtime", "sse", "websocket"],
    ),
    load(
        "skill:cli-tools",
        "Command-line tools with clap, click, cobra or commander: subcommands, flags, help text, exit codes and completions. Use when building a CLI.",
        &["clap", "cli", "click", "cobra", "command-line"],
    ),
    load(
        "skill:config-management",
        "Application configuration: environment variables, config files, defaults, validation and per-environment overrides. Use when settings are scattered or inconsistent.",
        &["config", "dotenv", "environment", "settings"],
    ),
    load(
        "skill:secrets-management",
        "Keep secrets out of code: Vault, SOPS, cloud secret managers, rotation and leaked key response. Use when handling API keys or credentials.",
        &["credentials", "secrets", "sops", "vault"],
    ),
    load(
        "skill:dependency-upgrades",
        "Upgrade dependencies safely: read changelogs, one major at a time, lockfiles, Renovate and Dependabot config. Use when bumping library versions.",
        &["dependabot", "dependencies", "renovate", "upgrades"],
    ),
    load(
        "skill:monorepo-tooling",
        "Monorepos with pnpm workspaces, Turborepo or Nx: task graphs, caching and package boundaries. Use when a JavaScript monorepo's builds get slow or tangled.",
        &["monorepo", "nx", "pnpm", "turborepo", "workspaces"],
    ),
    load(
        "skill:code-refactoring",
        "Refactor in small behaviour-preserving steps: extract functions, rename, split modules, remove duplication, with tests green at each step. Use when code is hard to change.",
        &["cleanup", "refactoring"],
    ),
    load(
        "skill:dead-code-removal",
        "Find and delete unused functions, exports, files and feature flags with tooling and search. Use when cleaning up a codebase.",
        &["cleanup", "unused"],
    ),
    load(
        "skill:error-handling",
        "Error handling across a service: typed errors, retries, timeouts, user-facing messages and not swallowing exceptions. Use when failures are silent or confusing.",
        &["exceptions", "errors", "reliability", "retries"],
    ),
    load(
        "skill:datetime-timezones",
        "Dates, times and time zones done right: UTC storage, DST, parsing, formatting and calendar math. Use when a date is off by an hour or a day.",
        &["dates", "dst", "time", "timezones"],
    ),
    // --- Data, analytics and ML -----------------------------------------------------------------
    load(
        "skill:pandas-analysis",
        "Data analysis with pandas: loading, cleaning, joins, groupby, pivots and quick summaries. Use when exploring a dataset or answering a question from a table of data.",
        &["analysis", "dataframes", "python"],
    ),
    load(
        "skill:jupyter-notebooks",
        "Keep Jupyter notebooks reproducible: kernels, cell order, parameters, outputs in git and converting to scripts. Use when working in .ipynb files.",
        &["ipynb", "notebooks", "python"],
    ),
    load(
        "skill:data-visualization",
        "Charts with matplotlib, seaborn or plotly: choosing the chart, labels, color and export. Use when turning data into a plot.",
        &["charts", "matplotlib", "plotly", "plots", "python"],
    ),
    load(
        "skill:ml-training",
        "Train and evaluate models with PyTorch or scikit-learn: data splits, metrics, overfitting and experiment tracking. Use when building a machine learning model.",
        &[
            "machine-learning",
            "ml",
            "python",
            "pytorch",
            "scikit-learn",
        ],
    ),
    load(
        "skill:llm-evals",
        "Evaluate LLM features: golden sets, graders, regression runs and comparing prompts or models. Use when changing a prompt or model and needing evidence it got better.",
        &["ai", "evals", "evaluation", "llm"],
    ),
    load(
        "skill:prompt-engineering",
        "Write and iterate on prompts for LLM features: instructions, examples, output formats and guarding against injection. Use when an AI feature gives poor answers.",
        &["ai", "llm", "prompts"],
    ),
    load(
        "skill:rag-pipeline",
        "Retrieval-augmented generation: chunking, embeddings, vector stores, reranking and citing sources. Use when an LLM must answer from your own documents.",
        &["ai", "embeddings", "llm", "retrieval", "vector-search"],
    ),
    load(
        "skill:airflow-dags",
        "Apache Airflow DAGs: operators, sensors, retries, backfills and idempotent tasks. Use when building or fixing a data pipeline in Airflow.",
        &["airflow", "etl", "orchestration", "pipelines"],
    ),
    load(
        "skill:spark-jobs",
        "Apache Spark and PySpark jobs: partitioning, joins, skew, caching and reading the UI. Use when a big data job is slow or runs out of memory.",
        &["big-data", "pyspark", "spark"],
    ),
    install(
        "skill:bigquery",
        "Query and manage BigQuery datasets with the bq CLI: cost estimates, partitioned tables and scheduled queries. Use when the data lives in BigQuery.",
        &["analytics", "gcp", "sql", "warehouse"],
        "Bash(bq query *) Bash(bq ls *)",
        true,
    ),
    load(
        "skill:ab-testing-stats",
        "Design and read A/B tests: sample size, significance, confidence intervals and common statistical traps. Use when deciding whether an experiment won.",
        &["ab-testing", "experiments", "statistics"],
    ),
    load(
        "skill:geospatial",
        "Geospatial data: PostGIS, GeoJSON, projections, spatial indexes and map tiles. Use when working with coordinates, shapes or maps.",
        &["geojson", "gis", "maps", "postgis"],
    ),
    load(
        "skill:web-scraping",
        "Scrape websites politely and robustly: robots.txt, selectors, pagination, rate limits and headless browsers. Use when extracting data from web pages.",
        &["crawler", "html", "scraping"],
    ),
    // --- Git, review and writing ----------------------------------------------------------------
    load(
        "skill:commit-messages",
        "Write clear commit messages in the Conventional Commits style: type, scope, imperative subject and a body that says why. Use when writing or fixing a commit message.",
        &["commits", "conventional-commits", "git"],
    ),
    install(
        "skill:git-commit",
        "Stage and commit the current changes as logical commits with git add, status, diff and commit pre-approved. Use when the user asks to commit their work.",
        &["commits", "git"],
        "Bash(git add *) Bash(git status *) Bash(git diff *) Bash(git commit *)",
        false,
    ),
    load(
        "skill:pr-description",
        "Write a pull request description: what changed, why, how it was tested, risks and screenshots. Use when opening a PR.",
        &["pull-requests", "review"],
    ),
    install(
        "skill:pr-review-comments",
        "Read the review comments on a GitHub pull request with gh, address each one and reply. Use when a reviewer left comments to resolve.",
        &["code-review", "gh", "github", "pull-requests"],
        "Bash(gh pr view *) Bash(gh api *)",
        true,
    ),
    load(
        "skill:changelog",
        "Keep a changelog: group entries by added, changed, fixed and removed, written for users. Use when preparing release notes or updating CHANGELOG.md.",
        &["keep-a-changelog", "release-notes", "releases"],
    ),
    install(
        "skill:release-versioning",
        "Cut a release: bump the semantic version, tag, update the changelog and push the tag. Use when shipping a new version of a library or app.",
        &["releases", "semver", "tags", "versions"],
        "Bash(git tag *) Bash(git push --tags) Bash(npm version *)",
        false,
    ),
    load(
        "skill:git-rebase-conflicts",
        "Rebase a branch, resolve merge conflicts file by file and recover with the reflog when it goes wrong. Use when git says there are conflicts.",
        &["conflicts", "git", "merge", "reflog"],
    ),
    load(
        "skill:git-bisect",
        "Find the commit that introduced a regression with git bisect, manual or scripted. Use when something worked last week and is broken now.",
        &["git", "regression"],
    ),
    load(
        "skill:code-review-checklist",
        "Review a diff: correctness, edge cases, tests, naming, security and performance, with comments ranked by severity. Use when reviewing someone's change.",
        &["code-review", "pull-requests", "quality"],
    ),
    manual(
        "skill:branch-protection",
        "Protect the main branch: required reviews, status checks, signed commits and merge queues; a repository admin changes the settings. Use when setting up a repository's rules.",
        &["github", "governance", "repository", "settings"],
    ),
    load(
        "skill:adr-writing",
        "Write architecture decision records: context, options considered, decision and consequences. Use when a design choice should be written down.",
        &["adr", "architecture", "decisions", "documentation"],
    ),
    load(
        "skill:readme-writing",
        "Write a README that gets people started: what it is, install, quick example, configuration and contributing. Use when a project's README is missing or stale.",
        &["docs", "documentation", "onboarding"],
    ),
    load(
        "skill:api-docs",
        "Document code APIs with docstrings, JSDoc, rustdoc or godoc, with examples that compile. Use when public functions lack documentation.",
        &["docs", "docstrings", "documentation", "jsdoc", "rustdoc"],
    ),
    load(
        "skill:mermaid-diagrams",
        "Draw sequence, flow, ER and architecture diagrams as Mermaid text that renders in Markdown. Use when explaining a system or a flow visually.",
        &["architecture", "diagrams", "documentation"],
    ),
    load(
        "skill:technical-writing",
        "Plain technical writing: short sentences, one idea per paragraph, defined terms and examples. Use when drafting design docs, guides or announcements.",
        &["docs", "documentation", "writing"],
    ),
    // --- Security -------------------------------------------------------------------------------
    load(
        "skill:security-audit",
        "Security review of application code: injection, broken auth, access control, secrets, SSRF and unsafe deserialization (OWASP Top 10). Use when auditing code for vulnerabilities.",
        &["appsec", "owasp", "security", "vulnerabilities"],
    ),
    install(
        "skill:dependency-audit",
        "Scan dependencies for known vulnerabilities with npm audit, pip-audit and cargo audit, and plan the upgrades. Use when a CVE is reported or before a release.",
        &[
            "cve",
            "dependencies",
            "security",
            "supply-chain",
            "vulnerabilities",
        ],
        "Bash(npm audit *) Bash(pip-audit *) Bash(cargo audit *)",
        false,
    ),
    install(
        "skill:secret-scanning",
        "Find leaked API keys and passwords in the repository and its history with gitleaks, then rotate them. Use when a secret may have been committed.",
        &["credentials", "gitleaks", "leaks", "secrets", "security"],
        "Bash(gitleaks detect *)",
        false,
    ),
    load(
        "skill:threat-modeling",
        "Threat model a feature with STRIDE: assets, trust boundaries, data flows and mitigations. Use when designing something that handles sensitive data or money.",
        &["security", "stride", "threats"],
    ),
    load(
        "skill:security-headers",
        "HTTP security headers: Content-Security-Policy, HSTS, CORS, cookies with SameSite and frame options. Use when a scanner flags missing headers or CORS blocks requests.",
        &["cors", "csp", "headers", "hsts", "security"],
    ),
    manual(
        "skill:penetration-test",
        "Commission an external penetration test: scope, rules of engagement, test accounts and retest of findings. A security firm performs it. Use before a launch or an audit.",
        &["pentest", "security", "vendor"],
    ),
    manual(
        "skill:soc2-compliance",
        "Prepare for a SOC 2 audit: controls, evidence collection, policies and access reviews; the compliance owner runs it. Use when a customer asks for a SOC 2 report.",
        &["audit", "compliance", "soc2"],
    ),
    manual(
        "skill:gdpr-requests",
        "Handle GDPR data subject requests: access, export and erasure of personal data within the deadline; the privacy officer signs off. Use when a user asks for their data or its deletion.",
        &["compliance", "gdpr", "personal-data", "privacy"],
    ),
    load(
        "skill:license-compliance",
        "Check open-source licenses of dependencies, attribution files and copyleft obligations. Use when shipping software that bundles third-party code.",
        &["licenses", "open-source", "sbom"],
    ),
    // --- Performance and debugging --------------------------------------------------------------
    load(
        "skill:performance-profiling",
        "Profile CPU and allocations with perf, py-spy, pprof or flamegraphs before optimizing. Use when code is slow and you do not yet know why.",
        &["cpu", "flamegraph", "performance", "profiling"],
    ),
    load(
        "skill:memory-leaks",
        "Hunt memory leaks: heap snapshots, allocation tracking, retained references and growth over time. Use when a process's memory keeps growing.",
        &["heap", "leaks", "memory"],
    ),
    load(
        "skill:systematic-debugging",
        "Debug methodically: reproduce, shrink the case, form one hypothesis at a time, verify the fix and add a regression test. Use when a bug's cause is unknown.",
        &["bugs", "debugging", "root-cause"],
    ),
    load(
        "skill:benchmarking",
        "Write benchmarks that mean something: warmup, enough iterations, variance, criterion, hyperfine and benchmark.js. Use when comparing the speed of two versions.",
        &["benchmarks", "criterion", "hyperfine", "performance"],
    ),
    load(
        "skill:stack-trace-reading",
        "Read stack traces and crash reports across languages, symbolicate them and find the frame that matters. Use when given an exception or panic to explain.",
        &["crash", "exceptions", "panic", "stacktrace"],
    ),
    // --- Agents ---------------------------------------------------------------------------------
    agent(
        "agent:code-reviewer",
        "Reviews staged and unstaged changes for bugs, security issues and convention breaks, reporting only high-confidence findings. Use after writing or changing code.",
        &["code-review", "quality", "review"],
    ),
    agent(
        "agent:debugger",
        "Finds the root cause of errors, failing tests and unexpected behaviour, then proposes a minimal fix. Use when something is broken and the cause is unclear.",
        &["bugs", "debugging", "errors", "root-cause"],
    ),
    agent(
        "agent:test-runner",
        "Runs the project's test suite, reads the failures and fixes them while keeping the original intent of each test. Use after code changes or when tests are red.",
        &["ci", "failing-tests", "testing"],
    ),
    editing_agent(
        "agent:deploy-with-verification",
        "Deploys a service, then verifies health checks, error rates and key endpoints and rolls back when they fail. Use when shipping a change to staging or production.",
        &["deploy", "production", "release", "rollback"],
    ),
    agent(
        "agent:doc-writer",
        "Writes and updates documentation (READMEs, guides, API references) from the code, keeping examples correct. Use when docs are missing or stale.",
        &["docs", "documentation", "readme"],
    ),
    agent(
        "agent:performance-profiler",
        "Profiles slow code paths, finds hotspots and proposes measured optimizations. Use when an endpoint, job or build is slow.",
        &["latency", "optimization", "performance", "profiling"],
    ),
    agent(
        "agent:security-auditor",
        "Audits code and configuration for vulnerabilities and insecure defaults and reports findings with severity. Use before a release or after touching auth.",
        &["appsec", "security", "vulnerabilities"],
    ),
    editing_agent(
        "agent:refactoring-assistant",
        "Restructures code for readability without changing behaviour, in small verified steps. Use when a module has grown hard to change.",
        &["cleanup", "refactoring"],
    ),
    agent(
        "agent:database-architect",
        "Designs schemas, indexes and migrations and reviews queries for correctness and performance. Use when modelling data or planning a risky migration.",
        &["database", "migrations", "schema", "sql"],
    ),
    agent(
        "agent:api-designer",
        "Designs HTTP and RPC APIs: resources, contracts, errors and versioning, and reviews proposals. Use when a new API surface is being planned.",
        &["api", "design", "rest"],
    ),
    agent(
        "agent:frontend-developer",
        "Builds frontend features in React, Vue or Svelte with accessible, responsive UI. Use for UI implementation work.",
        &["css", "frontend", "react", "ui"],
    ),
    agent(
        "agent:backend-architect",
        "Plans service boundaries, data flow, scaling and failure handling for backend systems. Use when designing a new service or splitting a monolith.",
        &["architecture", "microservices", "scalability"],
    ),
    agent(
        "agent:devops-engineer",
        "Sets up CI/CD, containers, infrastructure as code and monitoring. Use for build, deploy and infrastructure tasks.",
        &["ci", "docker", "infrastructure", "kubernetes"],
    ),
    agent(
        "agent:k8s-troubleshooter",
        "Diagnoses unhealthy Kubernetes workloads from events, logs, probes and resource usage. Use when pods crash or a rollout is stuck.",
        &["k8s", "kubectl", "kubernetes", "pods"],
    ),
    agent(
        "agent:data-analyst",
        "Answers questions from data with SQL and pandas and explains the result with a chart. Use for ad hoc analysis and metrics questions.",
        &["analytics", "pandas", "sql"],
    ),
    agent(
        "agent:ml-engineer",
        "Builds training and inference pipelines, evaluates models and prepares them for serving. Use for machine learning features.",
        &["machine-learning", "ml", "models", "pytorch"],
    ),
    agent(
        "agent:prompt-engineer",
        "Improves prompts for LLM-backed features and measures the change against examples. Use when an AI feature's output quality is poor.",
        &["ai", "llm", "prompts"],
    ),
    agent(
        "agent:accessibility-reviewer",
        "Reviews UI code and pages for WCAG problems and suggests fixes. Use when building UI that must be accessible.",
        &["a11y", "accessibility", "wcag"],
    ),
    editing_agent(
        "agent:dependency-updater",
        "Updates outdated dependencies one at a time, runs the tests and reports breaking changes. Use for routine dependency maintenance.",
        &["dependencies", "upgrades"],
    ),
    agent(
        "agent:flaky-test-hunter",
        "Reruns suspicious tests many times, isolates nondeterminism and proposes a fix. Use when CI fails intermittently.",
        &["ci", "flaky", "testing"],
    ),
    agent(
        "agent:incident-responder",
        "Guides an incident: gathers signals from logs and metrics, proposes mitigations and keeps a timeline. Use during a production outage.",
        &["incidents", "on-call", "outage", "sre"],
    ),
    agent(
        "agent:release-manager",
        "Prepares a release: collects merged changes, drafts notes, checks versions and the release checklist. Use before tagging a release.",
        &["changelog", "release-notes", "releases"],
    ),
    agent(
        "agent:sql-optimizer",
        "Rewrites slow SQL queries and proposes indexes from query plans. Use when the database is the bottleneck.",
        &["database", "indexes", "performance", "sql"],
    ),
    editing_agent(
        "agent:typescript-migrator",
        "Converts JavaScript files to TypeScript incrementally, adding types and fixing compiler errors. Use when migrating a JS codebase to TS.",
        &["javascript", "migration", "types", "typescript"],
    ),
    agent(
        "agent:python-expert",
        "Writes idiomatic, typed Python and reviews Python code for correctness and style. Use for Python-heavy tasks.",
        &["python", "typing"],
    ),
    agent(
        "agent:rust-expert",
        "Writes and reviews Rust with attention to ownership, error handling, unsafe and async. Use for Rust-heavy tasks.",
        &["async", "cargo", "ownership", "rust"],
    ),
    agent(
        "agent:go-expert",
        "Writes and reviews idiomatic Go with attention to errors, interfaces and concurrency. Use for Go-heavy tasks.",
        &["concurrency", "go", "golang"],
    ),
    agent(
        "agent:mobile-developer",
        "Builds features for iOS and Android apps, native or cross-platform. Use for mobile app work.",
        &["android", "ios", "mobile"],
    ),
    agent(
        "agent:codebase-explorer",
        "Traces how a feature works through an unfamiliar codebase and reports the files, entry points and data flow. Use when you need to understand existing code first.",
        &["architecture", "exploration", "onboarding"],
    ),
    agent(
        "agent:architecture-reviewer",
        "Reviews a design or a large change for coupling, layering and consistency with the existing architecture. Use for big refactors or new modules.",
        &["architecture", "design", "review"],
    ),
    agent(
        "agent:i18n-translator",
        "Translates UI message catalogs and keeps placeholders, plurals and tone consistent across locales. Use when adding or updating translations.",
        &["i18n", "locales", "translations"],
    ),
    agent(
        "agent:legacy-modernizer",
        "Plans and performs incremental modernization of legacy code: framework upgrades, strangler patterns and tests first. Use when old code must move to a new stack.",
        &["legacy", "migration", "modernization"],
    ),
    agent(
        "agent:payment-integration",
        "Implements payment flows with providers such as Stripe: checkout, webhooks, refunds and PCI scope. Use when adding payments to a product.",
        &["billing", "checkout", "payments", "stripe"],
    ),
    agent(
        "agent:graphql-architect",
        "Designs GraphQL schemas and federation, and fixes resolver performance. Use for GraphQL API work.",
        &["api", "graphql"],
    ),
    agent(
        "agent:terraform-reviewer",
        "Reviews Terraform plans and modules for destructive changes, drift and security misconfigurations. Use before applying an infrastructure change.",
        &["iac", "infrastructure", "terraform"],
    ),
    agent(
        "agent:changelog-writer",
        "Drafts changelog entries and release notes from merged pull requests and commits. Use when preparing a release announcement.",
        &["changelog", "release-notes"],
    ),
    agent(
        "agent:ci-fixer",
        "Reads a failed CI run's logs, finds the failing step and fixes the cause in code or pipeline config. Use when the build is red.",
        &["build", "ci", "pipelines"],
    ),
    agent(
        "agent:silent-failure-finder",
        "Finds swallowed exceptions, empty catch blocks and misleading fallbacks in changed code. Use when reviewing error handling.",
        &["error-handling", "errors", "exceptions", "reliability"],
    ),
    manual(
        "agent:product-manager",
        "Turns a feature idea into a product brief with user stories, acceptance criteria and open questions; a product owner must approve it. Use when scoping a feature.",
        &["planning", "product", "requirements", "user-stories"],
    ),
    manual(
        "agent:ux-researcher",
        "Plans user interviews and usability tests and synthesizes findings; real users take part. Use when deciding what to build next.",
        &["research", "usability", "ux"],
    ),
    // --- MCP servers ----------------------------------------------------------------------------
    remote(
        "mcp-server:github",
        "GitHub repositories, issues, pull requests, code search and Actions runs. Use when the task reads or changes things on GitHub.",
        &["actions", "issues", "pull-requests", "repositories"],
        "https://mcp.github.example/mcp",
        Some("GITHUB_TOKEN"),
    ),
    stdio(
        "mcp-server:gitlab",
        "GitLab projects, merge requests, issues and pipelines. Use when the code is hosted on GitLab.",
        &["issues", "merge-requests", "pipelines"],
        "@acme-mcp/server-gitlab",
        &["GITLAB_TOKEN"],
    ),
    stdio(
        "mcp-server:postgres",
        "Read-only SQL access to a PostgreSQL database: list schemas, describe tables and run queries. Use when you need to look at real data or the live schema.",
        &["database", "queries", "sql"],
        "@acme-mcp/server-postgres",
        &["DATABASE_URL"],
    ),
    stdio(
        "mcp-server:mysql",
        "Query a MySQL or MariaDB database and inspect its tables. Use when the application's data is in MySQL.",
        &["database", "mariadb", "sql"],
        "@acme-mcp/server-mysql",
        &["MYSQL_DSN"],
    ),
    stdio(
        "mcp-server:sqlite",
        "Open a local SQLite file, run queries and describe its tables. Use when a .db or .sqlite file needs inspecting.",
        &["database", "sql"],
        "@acme-mcp/server-sqlite",
        &[],
    ),
    stdio(
        "mcp-server:filesystem",
        "Read, write, move and search files within allowed directories. Use when working with files outside the current project.",
        &["directories", "files"],
        "@acme-mcp/server-filesystem",
        &[],
    ),
    remote(
        "mcp-server:sentry",
        "Sentry issues, stack traces, releases and performance traces of your projects. Use when investigating a production error reported in Sentry.",
        &["errors", "exceptions", "monitoring", "observability"],
        "https://mcp.sentry.example/mcp",
        Some("SENTRY_AUTH_TOKEN"),
    ),
    stdio(
        "mcp-server:slack",
        "Read channels and threads, search messages and post to Slack. Use when the task needs context from Slack or must notify a channel.",
        &["channels", "chat", "messages"],
        "@acme-mcp/server-slack",
        &["SLACK_BOT_TOKEN"],
    ),
    remote(
        "mcp-server:linear",
        "Linear issues, projects and cycles: search, create and update tickets. Use when work is tracked in Linear.",
        &["issues", "projects", "tickets"],
        "https://mcp.linear.example/mcp",
        Some("LINEAR_API_KEY"),
    ),
    stdio(
        "mcp-server:jira",
        "Jira issues, sprints, boards and JQL search. Use when the team tracks work in Jira.",
        &["atlassian", "issues", "sprints", "tickets"],
        "@acme-mcp/server-jira",
        &["JIRA_API_TOKEN"],
    ),
    manual(
        "mcp-server:notion",
        "Notion pages and databases through the hosted server with OAuth sign-in. Use when specs or notes live in Notion.",
        &["docs", "knowledge-base", "wiki"],
    ),
    stdio(
        "mcp-server:playwright-browser",
        "Drive a real browser through Playwright: navigate, click, fill forms, take screenshots and read the accessibility tree. Use when checking a web app by hand in a browser.",
        &["automation", "browser", "e2e", "playwright", "screenshots"],
        "@acme-mcp/server-playwright",
        &[],
    ),
    stdio(
        "mcp-server:puppeteer",
        "Headless Chrome through Puppeteer: open pages, run scripts, capture screenshots and PDFs. Use when scraping or rendering pages in Chrome.",
        &["browser", "chrome", "headless", "screenshots"],
        "@acme-mcp/server-puppeteer",
        &[],
    ),
    stdio(
        "mcp-server:fetch",
        "Fetch a URL and return it as Markdown or raw text. Use when you need the content of a web page or a remote file.",
        &["http", "markdown", "urls", "web"],
        "@acme-mcp/server-fetch",
        &[],
    ),
    stdio(
        "mcp-server:web-search",
        "Web search results with titles, snippets and links from a search API. Use when the answer needs current information from the web.",
        &["internet", "search", "web"],
        "@acme-mcp/server-web-search",
        &["SEARCH_API_KEY"],
    ),
    stdio(
        "mcp-server:docker",
        "List, start, stop and inspect Docker containers, images, volumes and logs. Use when managing local containers.",
        &["compose", "containers", "images"],
        "@acme-mcp/server-docker",
        &[],
    ),
    stdio(
        "mcp-server:kubernetes",
        "Kubernetes cluster access: pods, deployments, logs, events and applying manifests through the current kubeconfig. Use when working against a live cluster.",
        &["cluster", "k8s", "kubectl", "pods"],
        "@acme-mcp/server-kubernetes",
        &[],
    ),
    stdio(
        "mcp-server:aws",
        "AWS resources through the AWS APIs: S3 buckets, Lambda functions, CloudWatch logs and more. Use when the task touches an AWS account.",
        &["cloud", "cloudwatch", "lambda", "s3"],
        "@acme-mcp/server-aws",
        &["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
    ),
    remote(
        "mcp-server:cloudflare",
        "Cloudflare Workers, DNS records, KV, R2 and analytics. Use when deploying to or configuring Cloudflare.",
        &["cdn", "dns", "workers"],
        "https://mcp.cloudflare.example/mcp",
        Some("CLOUDFLARE_API_TOKEN"),
    ),
    remote(
        "mcp-server:vercel",
        "Vercel projects, deployments, build logs and environment variables. Use when a site is hosted on Vercel.",
        &["deployments", "hosting", "nextjs"],
        "https://mcp.vercel.example/mcp",
        Some("VERCEL_TOKEN"),
    ),
    remote(
        "mcp-server:stripe",
        "Stripe account data: customers, payments, subscriptions, invoices and refunds through the Stripe API. Use when you need to look up or change billing data in Stripe.",
        &["billing", "invoices", "payments", "subscriptions"],
        "https://mcp.stripe.example/mcp",
        Some("STRIPE_SECRET_KEY"),
    ),
    stdio(
        "mcp-server:redis",
        "Inspect and modify keys in a Redis instance: get, set, scan and TTLs. Use when debugging cached values or queues in Redis.",
        &["cache", "keys"],
        "@acme-mcp/server-redis",
        &["REDIS_URL"],
    ),
    stdio(
        "mcp-server:mongodb",
        "Query MongoDB collections, run aggregations and inspect indexes. Use when the data lives in MongoDB.",
        &["collections", "database", "mongo", "nosql"],
        "@acme-mcp/server-mongodb",
        &["MONGODB_URI"],
    ),
    stdio(
        "mcp-server:elasticsearch",
        "Search Elasticsearch indices, read mappings and run aggregations. Use when investigating search data or logs in Elasticsearch.",
        &["indices", "logs", "search"],
        "@acme-mcp/server-elasticsearch",
        &["ES_API_KEY"],
    ),
    remote(
        "mcp-server:figma",
        "Read Figma files: frames, components, styles and exported assets for implementation. Use when building UI from a Figma design.",
        &["components", "design", "ui"],
        "https://mcp.figma.example/mcp",
        Some("FIGMA_TOKEN"),
    ),
    manual(
        "mcp-server:google-drive",
        "Search and read Google Docs, Sheets and Drive files through the hosted connector with Google sign-in. Use when the information is in a shared Drive.",
        &["docs", "drive", "google", "sheets"],
    ),
    manual(
        "mcp-server:gmail",
        "Read, search and draft Gmail messages through the hosted connector with Google sign-in. Use when the task involves your email inbox.",
        &["email", "google", "inbox", "mail"],
    ),
    manual(
        "mcp-server:google-calendar",
        "Read and create Google Calendar events and find free slots, through the hosted connector with Google sign-in. Use when scheduling meetings.",
        &["calendar", "events", "google", "meetings"],
    ),
    stdio(
        "mcp-server:memory",
        "A persistent knowledge graph of entities and facts the assistant can store and recall across sessions. Use when something should be remembered for later.",
        &["knowledge-graph", "notes", "recall"],
        "@acme-mcp/server-memory",
        &[],
    ),
    stdio(
        "mcp-server:time",
        "Current time and conversions between time zones. Use when the answer depends on the current date or time somewhere.",
        &["clock", "timezones"],
        "@acme-mcp/server-time",
        &[],
    ),
    stdio(
        "mcp-server:sequential-thinking",
        "A scratchpad tool for breaking a hard problem into numbered steps and revising them. Use for multi-step reasoning and planning.",
        &["planning", "reasoning", "steps"],
        "@acme-mcp/server-sequential-thinking",
        &[],
    ),
    remote(
        "mcp-server:library-docs",
        "Up-to-date documentation and code examples for libraries and frameworks, by package and version. Use when unsure about a library's current API.",
        &["api-reference", "docs", "documentation", "libraries"],
        "https://mcp.library-docs.example/mcp",
        None,
    ),
    stdio(
        "mcp-server:grafana",
        "Query Grafana dashboards, Prometheus and Loki data sources, and alerts. Use when investigating metrics or logs behind a dashboard.",
        &["dashboards", "loki", "metrics", "prometheus"],
        "@acme-mcp/server-grafana",
        &["GRAFANA_API_KEY"],
    ),
    remote(
        "mcp-server:datadog",
        "Datadog metrics, logs, traces, monitors and incidents. Use when the service is monitored in Datadog.",
        &["apm", "logs", "metrics", "monitoring"],
        "https://mcp.datadog.example/mcp",
        Some("DD_API_KEY"),
    ),
    remote(
        "mcp-server:pagerduty",
        "PagerDuty incidents, on-call schedules and escalation policies. Use when checking who is on call or updating an incident.",
        &["incidents", "on-call", "paging"],
        "https://mcp.pagerduty.example/mcp",
        Some("PAGERDUTY_TOKEN"),
    ),
    stdio(
        "mcp-server:confluence",
        "Search and read Confluence spaces and pages, and create pages. Use when team documentation lives in Confluence.",
        &["atlassian", "docs", "wiki"],
        "@acme-mcp/server-confluence",
        &["CONFLUENCE_API_TOKEN"],
    ),
    stdio(
        "mcp-server:snowflake",
        "Run SQL against Snowflake warehouses and browse databases and schemas. Use when analytics data is in Snowflake.",
        &["analytics", "sql", "warehouse"],
        "@acme-mcp/server-snowflake",
        &["SNOWFLAKE_PASSWORD"],
    ),
    stdio(
        "mcp-server:bigquery",
        "Query BigQuery datasets and inspect table schemas. Use when the warehouse is BigQuery.",
        &["analytics", "gcp", "sql", "warehouse"],
        "@acme-mcp/server-bigquery",
        &["GOOGLE_APPLICATION_CREDENTIALS"],
    ),
    stdio(
        "mcp-server:terraform-registry",
        "Look up Terraform providers, resources and module documentation in the public registry. Use when writing Terraform for an unfamiliar provider.",
        &["iac", "providers", "terraform"],
        "@acme-mcp/server-terraform-registry",
        &[],
    ),
    stdio(
        "mcp-server:npm-registry",
        "Search npm packages, read their metadata, versions and download counts. Use when choosing or checking a JavaScript dependency.",
        &["dependencies", "javascript", "npm", "packages"],
        "@acme-mcp/server-npm-registry",
        &[],
    ),
    stdio(
        "mcp-server:openapi-explorer",
        "Load an OpenAPI document and call its operations as tools. Use when exercising a documented HTTP API.",
        &["api", "http", "openapi", "rest"],
        "@acme-mcp/server-openapi",
        &[],
    ),
    stdio(
        "mcp-server:git",
        "Git history, blame, diffs, branches and commits of local repositories. Use when you need repository history beyond the working tree.",
        &["blame", "history", "vcs"],
        "@acme-mcp/server-git",
        &[],
    ),
    stdio(
        "mcp-server:obsidian",
        "Read and search notes in a local Obsidian vault. Use when personal notes are kept in Obsidian.",
        &["markdown", "notes", "vault"],
        "@acme-mcp/server-obsidian",
        &[],
    ),
    remote(
        "mcp-server:zendesk",
        "Zendesk tickets, users and help-center articles. Use when a bug report came in through customer support.",
        &["customer-support", "support", "tickets"],
        "https://mcp.zendesk.example/mcp",
        Some("ZENDESK_API_TOKEN"),
    ),
    remote(
        "mcp-server:hubspot",
        "HubSpot CRM contacts, companies, deals and notes. Use when a task involves sales or customer records.",
        &["contacts", "crm", "deals", "sales"],
        "https://mcp.hubspot.example/mcp",
        Some("HUBSPOT_TOKEN"),
    ),
    stdio(
        "mcp-server:s3",
        "List, read and upload objects in S3-compatible buckets. Use when files live in object storage.",
        &["buckets", "objects", "storage"],
        "@acme-mcp/server-s3",
        &["S3_SECRET_ACCESS_KEY"],
    ),
    // --- Harnesses ------------------------------------------------------------------------------
    manual(
        "harness:pr-review-bot",
        "Runs a coding agent in CI on every pull request and posts review comments. Use to automate first-pass reviews in GitHub Actions.",
        &[
            "automation",
            "ci",
            "github-actions",
            "pull-requests",
            "review",
        ],
    ),
    manual(
        "harness:nightly-autofix",
        "A scheduled CI job that lets an agent fix lint errors and failing tests overnight and open a pull request. Use to keep a large repository green.",
        &["automation", "ci", "lint", "schedule"],
    ),
    manual(
        "harness:agent-eval",
        "Runs a coding agent against a suite of tasks in containers and scores the patches. Use when comparing agents, prompts or models on real issues.",
        &["benchmarks", "docker", "evaluation", "llm"],
    ),
    manual(
        "harness:issue-triage-bot",
        "Labels, deduplicates and routes new issues with an agent in CI. Use when the issue tracker gets more reports than people can sort.",
        &["automation", "issues", "labels", "triage"],
    ),
    manual(
        "harness:headless-loop",
        "Runs an agent headless in a loop on one task until its checks pass, with a budget. Use for long unattended refactors.",
        &["automation", "headless", "loops"],
    ),
];

/// Undirected `related` edges (spec/catalog.md §1.2): entries a person would use together.
pub const RELATED: &[(&str, &str)] = &[
    ("skill:pdf", "skill:docx"),
    ("skill:xlsx", "skill:csv-cleaning"),
    ("skill:pptx", "skill:docx"),
    ("skill:playwright-e2e", "mcp-server:playwright-browser"),
    ("skill:playwright-e2e", "skill:flaky-test-triage"),
    ("skill:pytest", "skill:test-coverage"),
    ("skill:pytest", "skill:python-typing"),
    ("skill:jest", "skill:vitest"),
    ("skill:rust-tests", "skill:rust-clippy"),
    ("skill:flaky-test-triage", "agent:flaky-test-hunter"),
    ("skill:terraform", "agent:terraform-reviewer"),
    ("skill:terraform", "mcp-server:terraform-registry"),
    ("skill:helm-charts", "skill:kubernetes-manifests"),
    ("skill:kubectl-debugging", "agent:k8s-troubleshooter"),
    ("skill:kubectl-debugging", "mcp-server:kubernetes"),
    ("skill:dockerfile", "skill:docker-compose"),
    ("skill:docker-compose", "mcp-server:docker"),
    ("skill:github-actions", "agent:ci-fixer"),
    ("skill:github-actions", "skill:ci-caching"),
    ("skill:prometheus-alerts", "skill:grafana-dashboards"),
    ("skill:grafana-dashboards", "mcp-server:grafana"),
    ("skill:incident-postmortem", "agent:incident-responder"),
    ("skill:postgres-migrations", "mcp-server:postgres"),
    ("skill:postgres-migrations", "agent:database-architect"),
    ("skill:sql-tuning", "agent:sql-optimizer"),
    ("skill:react-components", "skill:storybook"),
    ("skill:react-components", "skill:nextjs-app-router"),
    ("skill:accessibility-audit", "agent:accessibility-reviewer"),
    ("skill:i18n-localization", "agent:i18n-translator"),
    ("skill:rust-clippy", "agent:rust-expert"),
    ("skill:stripe-payments", "mcp-server:stripe"),
    ("skill:stripe-payments", "agent:payment-integration"),
    ("skill:pandas-analysis", "skill:data-visualization"),
    ("skill:pandas-analysis", "agent:data-analyst"),
    ("skill:llm-evals", "skill:prompt-engineering"),
    ("skill:commit-messages", "skill:git-commit"),
    ("skill:changelog", "skill:release-versioning"),
    ("skill:changelog", "agent:changelog-writer"),
    ("skill:pr-review-comments", "mcp-server:github"),
    ("skill:code-review-checklist", "agent:code-reviewer"),
    ("skill:security-audit", "agent:security-auditor"),
    ("skill:secret-scanning", "skill:secrets-management"),
    ("skill:performance-profiling", "agent:performance-profiler"),
    ("skill:systematic-debugging", "agent:debugger"),
    ("skill:readme-writing", "agent:doc-writer"),
    ("skill:stack-trace-reading", "mcp-server:sentry"),
];
