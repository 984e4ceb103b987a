//! The labelled prompts of `ctx-bench plan-quality`: what a person types into a coding agent,
//! each with the set of catalog entries that would be a correct pick for it.
//!
//! How the labels were set: `relevant` holds the entry a person would reach for first and every
//! other entry that would genuinely help with the task (a skill and the MCP server that does the
//! same job against the live system, a skill and the subagent of the same speciality). An entry
//! that merely shares a word with the prompt, or a general helper that helps with anything (a
//! reviewer for a prompt that asks for no review), is not relevant. An empty set means that no
//! entry of the catalog helps: small talk, questions the model answers from what it knows, and
//! tasks no entry covers. The labels follow the prompt's meaning, never what any version of the
//! scorer returns.

/// What a prompt exercises; the report breaks the figures down by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// An ordinary task with at least one fitting entry.
    Plain,
    /// The prompt spells out the name of a relevant entry ("the pdf skill", "the code-reviewer
    /// agent", "Terraform").
    Entity,
    /// The prompt shares only generic words ("fix", "data", "service", "module", "with") with
    /// wrong entries; the right entry is found by meaning.
    Generic,
    /// Every relevant entry is `manual`: the person sets it up or acts.
    ManualOnly,
    /// No entry fits: the right plan is empty.
    NoFit,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Entity => "entity",
            Kind::Generic => "generic-words",
            Kind::ManualOnly => "manual-only",
            Kind::NoFit => "no-fit",
        }
    }

    pub const ALL: [Kind; 5] = [
        Kind::Plain,
        Kind::Entity,
        Kind::Generic,
        Kind::ManualOnly,
        Kind::NoFit,
    ];
}

/// One labelled prompt.
#[derive(Debug, Clone, Copy)]
pub struct Labelled {
    pub kind: Kind,
    pub prompt: &'static str,
    pub relevant: &'static [&'static str],
}

const fn p(kind: Kind, prompt: &'static str, relevant: &'static [&'static str]) -> Labelled {
    Labelled {
        kind,
        prompt,
        relevant,
    }
}

use Kind::{Entity, Generic, ManualOnly, NoFit, Plain};

pub const PROMPTS: &[Labelled] = &[
    // --- Testing --------------------------------------------------------------------------------
    p(
        Entity,
        "add Playwright e2e tests for the checkout flow",
        &["skill:playwright-e2e", "mcp-server:playwright-browser"],
    ),
    p(
        Entity,
        "fix the flaky pytest in CI, it fails about one run in five",
        &[
            "skill:flaky-test-triage",
            "skill:pytest",
            "agent:flaky-test-hunter",
            "agent:ci-fixer",
            "agent:test-runner",
        ],
    ),
    p(
        Entity,
        "set up Jest with coverage thresholds for the web package",
        &["skill:jest", "skill:test-coverage"],
    ),
    p(
        Plain,
        "add property-based tests for the money rounding code",
        &["skill:property-based-testing"],
    ),
    p(
        Entity,
        "write table-driven tests for the tokenizer package in Go",
        &["skill:go-table-tests", "agent:go-expert"],
    ),
    p(
        Entity,
        "set up Vitest for the Vue app",
        &["skill:vitest", "skill:vue-components"],
    ),
    p(
        Plain,
        "use cypress to test the cart page",
        &["skill:cypress-testing"],
    ),
    p(
        Plain,
        "run a load test against the search endpoint with 500 concurrent users",
        &["skill:load-testing"],
    ),
    p(
        Plain,
        "add Pact contract tests between the web app and the orders API",
        &["skill:contract-testing"],
    ),
    p(
        Plain,
        "implement the discount calculation test-first",
        &["skill:test-driven-development"],
    ),
    p(
        Plain,
        "our tests have 90% coverage but obvious bugs still get through",
        &["skill:mutation-testing", "skill:test-coverage"],
    ),
    p(
        Plain,
        "which parts of the code have no tests at all?",
        &["skill:test-coverage"],
    ),
    p(
        Plain,
        "catch CSS regressions with screenshot comparisons in CI",
        &["skill:visual-regression"],
    ),
    p(
        Plain,
        "write snapshot tests for the CLI's help output",
        &["skill:snapshot-testing"],
    ),
    p(
        Entity,
        "add integration tests for the Rust crate's HTTP client",
        &["skill:rust-tests", "agent:rust-expert"],
    ),
    p(
        Entity,
        "ask the test-runner to run the whole suite and fix what fails",
        &["agent:test-runner"],
    ),
    // --- Documents ------------------------------------------------------------------------------
    p(
        Entity,
        "the invoice PDF is rendered wrong, extract the tables so I can compare them with the order data",
        &["skill:pdf", "skill:invoice-generator"],
    ),
    p(
        Entity,
        "use the pdf skill to merge these three contracts into one file",
        &["skill:pdf"],
    ),
    p(
        Entity,
        "xlsx: recalculate the totals column in report.xlsx",
        &["skill:xlsx"],
    ),
    p(
        Plain,
        "make a slide deck from these release notes for the all-hands",
        &["skill:pptx"],
    ),
    p(
        Entity,
        "convert contract.docx to PDF and keep the tracked changes visible",
        &["skill:docx", "skill:pdf"],
    ),
    p(
        Plain,
        "build a quarterly revenue spreadsheet with a chart per region",
        &["skill:xlsx"],
    ),
    p(
        Plain,
        "render the docs folder as a static HTML site",
        &["skill:markdown-to-html"],
    ),
    p(
        Generic,
        "clean up the messy data in customers.csv before we import it",
        &["skill:csv-cleaning", "skill:pandas-analysis"],
    ),
    // --- Infrastructure -------------------------------------------------------------------------
    p(
        Plain,
        "create a Helm chart for the api service",
        &[
            "skill:helm-charts",
            "skill:kubernetes-manifests",
            "agent:devops-engineer",
        ],
    ),
    p(
        Entity,
        "write terraform for an S3 bucket with versioning and a lifecycle rule",
        &[
            "skill:terraform",
            "mcp-server:terraform-registry",
            "agent:terraform-reviewer",
        ],
    ),
    p(
        Entity,
        "run terraform plan for the staging workspace and explain the diff",
        &[
            "skill:terraform",
            "agent:terraform-reviewer",
            "mcp-server:terraform-registry",
        ],
    ),
    p(
        Plain,
        "pods keep going into CrashLoopBackOff after the deploy",
        &[
            "skill:kubectl-debugging",
            "agent:k8s-troubleshooter",
            "mcp-server:kubernetes",
        ],
    ),
    p(
        Entity,
        "add a Dockerfile for the Go service and keep the image small",
        &["skill:dockerfile", "agent:devops-engineer"],
    ),
    p(
        Entity,
        "add a healthcheck to docker-compose so the api waits for postgres",
        &["skill:docker-compose"],
    ),
    p(
        Entity,
        "write an Ansible role that installs nginx and our TLS certificates",
        &[
            "skill:ansible-playbooks",
            "skill:nginx-config",
            "skill:tls-certificates",
        ],
    ),
    p(
        Plain,
        "the HTTPS certificate on staging expired, renew it and automate the renewal",
        &["skill:tls-certificates"],
    ),
    p(
        Entity,
        "set up Prometheus alerts for when the error rate goes above 2%",
        &["skill:prometheus-alerts", "mcp-server:grafana"],
    ),
    p(
        Entity,
        "create a Grafana dashboard for checkout latency",
        &["skill:grafana-dashboards", "mcp-server:grafana"],
    ),
    p(
        Entity,
        "add OpenTelemetry tracing across the gateway and the order service",
        &["skill:opentelemetry"],
    ),
    p(
        Plain,
        "write the postmortem for yesterday's outage",
        &["skill:incident-postmortem", "agent:incident-responder"],
    ),
    p(
        Plain,
        "production is down, 502s everywhere, help",
        &["agent:incident-responder", "skill:nginx-config"],
    ),
    p(
        Plain,
        "write a runbook for the disk-full alert",
        &["skill:runbook-writing"],
    ),
    p(
        Plain,
        "write a bash script that rotates the logs and keeps the last 7 days",
        &["skill:bash-scripting"],
    ),
    p(
        Plain,
        "run the nightly report as a systemd timer instead of cron",
        &["skill:systemd-units", "skill:cron-scheduling"],
    ),
    p(
        Entity,
        "add a Makefile with build, test and lint targets",
        &["skill:makefile"],
    ),
    p(
        Entity,
        "our Bazel build fails after adding the new proto package",
        &["skill:bazel-build", "skill:protobuf-grpc"],
    ),
    p(
        Plain,
        "write the CMakeLists for the new C++ library",
        &["skill:cmake"],
    ),
    p(
        Entity,
        "the AWS bill doubled this month, find out why",
        &["skill:cloud-cost-review", "mcp-server:aws"],
    ),
    p(
        Plain,
        "roll out the new pricing page as a canary to 5% of users",
        &["skill:blue-green-deploys", "skill:feature-flags"],
    ),
    p(
        Plain,
        "set up Argo CD to sync the staging manifests from git",
        &["skill:argocd-gitops"],
    ),
    p(
        Plain,
        "cache node_modules in the GitLab pipeline",
        &["skill:gitlab-ci", "skill:ci-caching"],
    ),
    p(
        Entity,
        "set up a GitHub Actions workflow that runs cargo test and clippy on every push",
        &["skill:github-actions", "agent:devops-engineer"],
    ),
    p(
        Plain,
        "write a GitHub Action that deploys to Cloud Run on merge",
        &["skill:github-actions", "skill:gcp-cloud-run"],
    ),
    p(
        Plain,
        "the build on main is red since this morning, find out why",
        &[
            "agent:ci-fixer",
            "skill:github-actions",
            "mcp-server:github",
            "skill:git-bisect",
        ],
    ),
    p(
        Plain,
        "write CDK code for a new DynamoDB table",
        &["skill:aws-cdk"],
    ),
    p(
        Entity,
        "set up CloudFormation for the queue and the lambda",
        &["skill:cloudformation"],
    ),
    p(
        Plain,
        "nginx returns 413 when people upload large files",
        &["skill:nginx-config", "skill:file-uploads"],
    ),
    p(
        Entity,
        "deploy-with-verification to staging please",
        &["agent:deploy-with-verification"],
    ),
    p(
        Plain,
        "deploy the new version to production and make sure nothing breaks",
        &["agent:deploy-with-verification", "skill:blue-green-deploys"],
    ),
    p(
        Plain,
        "set up a dev shell with flake.nix for this repo",
        &["skill:nix-flakes"],
    ),
    p(
        Plain,
        "set the Helm values for prod to 3 replicas with resource limits",
        &["skill:helm-charts", "skill:kubernetes-manifests"],
    ),
    // --- Databases ------------------------------------------------------------------------------
    p(
        Plain,
        "our postgres migration that added a NOT NULL column locked the users table for ten minutes, how do we do it safely next time",
        &["skill:postgres-migrations", "agent:database-architect"],
    ),
    p(
        Plain,
        "write a migration that adds an index on orders.created_at without downtime",
        &[
            "skill:postgres-migrations",
            "skill:sql-tuning",
            "agent:database-architect",
        ],
    ),
    p(
        Plain,
        "this query takes 4 seconds: SELECT * FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.region = 'EU'",
        &["skill:sql-tuning", "agent:sql-optimizer"],
    ),
    p(
        Entity,
        "what's in the users table on the staging postgres?",
        &["mcp-server:postgres"],
    ),
    p(
        Plain,
        "add a Prisma model for comments with a relation to posts",
        &["skill:prisma-schema"],
    ),
    p(
        Plain,
        "generate an Alembic migration for the new status column",
        &["skill:alembic-migrations"],
    ),
    p(
        Plain,
        "cache the product catalog in Redis for 10 minutes",
        &["skill:redis-caching", "skill:caching-strategies"],
    ),
    p(
        Entity,
        "check the redis keys matching session:* and their TTLs",
        &["mcp-server:redis", "skill:redis-caching"],
    ),
    p(
        Plain,
        "write a Mongo aggregation that counts orders per day",
        &["skill:mongodb", "mcp-server:mongodb"],
    ),
    p(
        Plain,
        "create a dbt model for weekly revenue",
        &["skill:dbt-models"],
    ),
    p(
        Plain,
        "our Kafka consumer group keeps rebalancing",
        &["skill:kafka-streams"],
    ),
    p(
        Plain,
        "add a GraphQL query for a user's orders with cursor pagination",
        &["skill:graphql-schema", "agent:graphql-architect"],
    ),
    p(
        Entity,
        "open the app.sqlite file and show me the schema",
        &["mcp-server:sqlite", "skill:sqlite"],
    ),
    p(
        Entity,
        "check the slow queries in the MySQL database",
        &[
            "mcp-server:mysql",
            "skill:sql-tuning",
            "agent:sql-optimizer",
            "agent:database-architect",
        ],
    ),
    p(
        Generic,
        "help me fix the data model for orders with multiple shipping addresses",
        &["agent:database-architect"],
    ),
    // --- Frontend and mobile --------------------------------------------------------------------
    p(
        Plain,
        "build a React component for a date range picker",
        &["skill:react-components", "agent:frontend-developer"],
    ),
    p(
        Plain,
        "make the signup form accessible for screen readers",
        &[
            "skill:accessibility-audit",
            "agent:accessibility-reviewer",
            "skill:form-validation",
        ],
    ),
    p(
        Plain,
        "add German and French translations to the app",
        &["skill:i18n-localization", "agent:i18n-translator"],
    ),
    p(
        Plain,
        "translate the error messages into Spanish",
        &["agent:i18n-translator", "skill:i18n-localization"],
    ),
    p(
        Plain,
        "our Next.js page flashes unstyled content on first load",
        &[
            "skill:nextjs-app-router",
            "skill:web-performance",
            "agent:frontend-developer",
        ],
    ),
    p(
        Plain,
        "make the grid layout stack into one column on phones",
        &["skill:css-layout", "agent:frontend-developer"],
    ),
    p(
        Entity,
        "build the Svelte component for the notification bell",
        &["skill:svelte", "agent:frontend-developer"],
    ),
    p(
        Entity,
        "migrate this Angular service to signals",
        &["skill:angular"],
    ),
    p(
        Plain,
        "style the pricing cards with Tailwind",
        &["skill:tailwind-css"],
    ),
    p(
        Plain,
        "move the cart state from React context to Zustand",
        &["skill:state-management"],
    ),
    p(
        Entity,
        "the React Native app crashes on Android when opening the camera",
        &["skill:react-native", "agent:mobile-developer"],
    ),
    p(
        Entity,
        "build the login screen in SwiftUI",
        &["skill:swiftui", "agent:mobile-developer"],
    ),
    p(
        Entity,
        "write a Storybook story for the Button component with all its variants",
        &["skill:storybook"],
    ),
    p(
        Plain,
        "add Open Graph tags and a sitemap to the marketing site",
        &["skill:seo-metadata"],
    ),
    p(
        Plain,
        "validate the signup form with zod and show the errors inline",
        &["skill:form-validation"],
    ),
    p(
        Plain,
        "the vite dev server proxy to the backend is not working",
        &["skill:vite-config"],
    ),
    p(
        Plain,
        "make the app work offline",
        &["skill:service-worker-pwa"],
    ),
    p(
        Plain,
        "the landing page takes 8 seconds to load, make it faster",
        &[
            "skill:web-performance",
            "skill:performance-profiling",
            "agent:performance-profiler",
        ],
    ),
    p(
        Plain,
        "implement the settings screen from the mockups the designer sent",
        &[
            "skill:design-handoff",
            "mcp-server:figma",
            "agent:frontend-developer",
        ],
    ),
    p(
        Entity,
        "export the Figma frames for the onboarding screens",
        &["mcp-server:figma"],
    ),
    // --- Backend and languages ------------------------------------------------------------------
    p(
        Plain,
        "fix all the clippy warnings",
        &["skill:rust-clippy", "agent:rust-expert"],
    ),
    p(
        Plain,
        "why does this not compile: borrowed value does not live long enough",
        &["agent:rust-expert"],
    ),
    p(
        Plain,
        "our tokio service deadlocks under load",
        &["skill:rust-async", "agent:rust-expert", "agent:debugger"],
    ),
    p(
        Plain,
        "add type hints to utils.py and make mypy pass",
        &["skill:python-typing", "agent:python-expert"],
    ),
    p(
        Plain,
        "publish this library to PyPI",
        &["skill:python-packaging", "skill:release-versioning"],
    ),
    p(
        Entity,
        "write a FastAPI endpoint to upload an avatar image and resize it",
        &[
            "skill:fastapi",
            "skill:image-processing",
            "skill:file-uploads",
        ],
    ),
    p(
        Plain,
        "the Celery worker retries the same task forever",
        &[
            "skill:celery-tasks",
            "skill:background-jobs",
            "skill:error-handling",
        ],
    ),
    p(
        Plain,
        "find the goroutine leak in the websocket hub",
        &[
            "skill:go-concurrency",
            "agent:go-expert",
            "skill:memory-leaks",
            "skill:websockets",
        ],
    ),
    p(
        Plain,
        "the Go build fails with: missing go.sum entry for module",
        &["skill:go-modules", "agent:go-expert"],
    ),
    p(
        Plain,
        "convert this JavaScript project to TypeScript",
        &["agent:typescript-migrator", "skill:typescript-strict"],
    ),
    p(
        Entity,
        "write a Laravel policy so only owners can edit their posts",
        &["skill:laravel"],
    ),
    p(
        Entity,
        "add a Rails migration and model for invoices",
        &["skill:rails"],
    ),
    p(
        Plain,
        "add a minimal API endpoint in ASP.NET for health checks",
        &["skill:dotnet-aspnet"],
    ),
    p(
        Plain,
        "the C++ server corrupts memory under load",
        &["skill:cpp-sanitizers", "agent:debugger"],
    ),
    p(
        Plain,
        "compile the image filter to wasm and call it from the browser",
        &["skill:webassembly", "skill:image-processing"],
    ),
    p(
        Plain,
        "write a Phoenix LiveView for the chat room",
        &["skill:elixir-phoenix"],
    ),
    p(
        Entity,
        "the Spring Boot app can't find the datasource bean",
        &["skill:spring-boot"],
    ),
    p(
        Entity,
        "convert the callbacks in this Kotlin repository class to coroutines",
        &["skill:kotlin-coroutines"],
    ),
    p(
        Entity,
        "add a Django admin page for refunds",
        &["skill:django"],
    ),
    p(
        Plain,
        "explain what ^\\d{3}-\\d{4}$ matches and make it accept an extension number",
        &["skill:regex"],
    ),
    p(
        Entity,
        "write a JSON Schema for our config file",
        &["skill:json-schema", "skill:config-management"],
    ),
    p(
        Plain,
        "add a streaming RPC to the inventory proto",
        &["skill:protobuf-grpc"],
    ),
    p(
        Entity,
        "design the REST API for managing team invitations",
        &[
            "skill:rest-api-design",
            "agent:api-designer",
            "skill:openapi-spec",
        ],
    ),
    p(
        Entity,
        "write an OpenAPI spec for the orders endpoints",
        &["skill:openapi-spec", "skill:rest-api-design"],
    ),
    p(
        Plain,
        "add a v2 of the /users endpoint without breaking the mobile clients",
        &["skill:api-versioning", "skill:rest-api-design"],
    ),
    p(
        Entity,
        "receive GitHub webhooks and verify their signatures",
        &["skill:webhooks"],
    ),
    p(Plain, "add Sign in with Google", &["skill:oauth-login"]),
    p(
        Plain,
        "our JWTs never expire, fix that",
        &["skill:jwt-sessions", "skill:security-audit"],
    ),
    p(
        Entity,
        "add Stripe subscriptions with a 14-day trial",
        &[
            "skill:stripe-payments",
            "skill:billing-subscriptions",
            "agent:payment-integration",
            "mcp-server:stripe",
        ],
    ),
    p(
        Plain,
        "send a password reset email",
        &["skill:email-sending"],
    ),
    p(
        Plain,
        "send the customer a text message when the order ships",
        &["skill:sms-notifications"],
    ),
    p(
        Entity,
        "let users upload profile photos to S3",
        &[
            "skill:file-uploads",
            "skill:image-processing",
            "mcp-server:s3",
            "mcp-server:aws",
        ],
    ),
    p(
        Plain,
        "generate HLS streams from uploaded videos",
        &["skill:video-transcoding"],
    ),
    p(
        Plain,
        "put the new checkout behind a feature flag",
        &["skill:feature-flags"],
    ),
    p(
        Plain,
        "add live updates to the order status page",
        &["skill:websockets"],
    ),
    p(
        Plain,
        "write a CLI with import and export subcommands",
        &["skill:cli-tools"],
    ),
    p(
        Plain,
        "we have API keys hardcoded in settings.py, move them out",
        &[
            "skill:secrets-management",
            "skill:config-management",
            "skill:secret-scanning",
        ],
    ),
    p(
        Plain,
        "the API returns 429 too often for our biggest customer",
        &["skill:rate-limiting"],
    ),
    p(
        Plain,
        "upgrade React from 17 to 18",
        &[
            "skill:dependency-upgrades",
            "agent:dependency-updater",
            "skill:react-components",
            "agent:frontend-developer",
        ],
    ),
    p(
        Plain,
        "the turborepo build cache never hits",
        &["skill:monorepo-tooling", "skill:ci-caching"],
    ),
    p(
        Plain,
        "delete unused exports and files",
        &["skill:dead-code-removal"],
    ),
    p(
        Plain,
        "this 2000-line OrderManager class is impossible to change, split it up",
        &["skill:code-refactoring", "agent:refactoring-assistant"],
    ),
    p(
        Plain,
        "find where we swallow exceptions in the sync code",
        &["agent:silent-failure-finder", "skill:error-handling"],
    ),
    p(
        Plain,
        "move our Python 2 scripts to Python 3",
        &["agent:legacy-modernizer", "agent:python-expert"],
    ),
    // --- Generic words only ---------------------------------------------------------------------
    p(
        Generic,
        "fix the off-by-one-hour bug in the report service since the clocks changed",
        &["skill:datetime-timezones"],
    ),
    p(
        Generic,
        "the data in the export module is wrong for customers with a plus sign in their email",
        &["skill:systematic-debugging", "agent:debugger"],
    ),
    p(
        Generic,
        "the service crashes with a segfault in the image module",
        &[
            "skill:cpp-sanitizers",
            "skill:stack-trace-reading",
            "agent:debugger",
        ],
    ),
    p(
        Generic,
        "fix the memory growth in the worker service, it gets OOM-killed every night",
        &[
            "skill:memory-leaks",
            "skill:performance-profiling",
            "agent:performance-profiler",
            "agent:debugger",
        ],
    ),
    p(
        Generic,
        "replace the home-made retry loop in the payment module with exponential backoff",
        &["skill:error-handling"],
    ),
    p(
        Generic,
        "the search service returns irrelevant results for short queries",
        &["skill:elasticsearch-queries", "mcp-server:elasticsearch"],
    ),
    p(
        Generic,
        "write a module that runs the nightly cleanup job at 2am Berlin time",
        &[
            "skill:cron-scheduling",
            "skill:datetime-timezones",
            "skill:background-jobs",
        ],
    ),
    p(
        Generic,
        "fix the date parsing in the import module, it reads 03/04 as March instead of April",
        &["skill:datetime-timezones"],
    ),
    p(
        Generic,
        "add docstrings to the public functions in the client module",
        &["skill:api-docs"],
    ),
    p(
        Generic,
        "move the slow PDF rendering out of the request handler into a background worker",
        &["skill:background-jobs"],
    ),
    // --- Git, review, writing -------------------------------------------------------------------
    p(
        Plain,
        "commit my changes",
        &["skill:git-commit", "skill:commit-messages"],
    ),
    p(
        Plain,
        "write a good commit message for the staged diff",
        &["skill:commit-messages", "skill:git-commit"],
    ),
    p(
        Plain,
        "review my diff before I push",
        &["agent:code-reviewer", "skill:code-review-checklist"],
    ),
    p(
        Entity,
        "run the code-reviewer agent on my branch",
        &["agent:code-reviewer", "skill:code-review-checklist"],
    ),
    p(
        Entity,
        "open a PR with a description of what this branch changes",
        &["skill:pr-description", "mcp-server:github"],
    ),
    p(
        Entity,
        "address the review comments on PR 482",
        &["skill:pr-review-comments", "mcp-server:github"],
    ),
    p(
        Entity,
        "use the github mcp server to list open issues labelled bug",
        &["mcp-server:github"],
    ),
    p(
        Plain,
        "rebase my branch on main, there are conflicts in package.json",
        &["skill:git-rebase-conflicts"],
    ),
    p(
        Plain,
        "the export worked in v2.3 and is broken in v2.4, find the commit that broke it",
        &["skill:git-bisect", "mcp-server:git"],
    ),
    p(
        Entity,
        "update the changelog for the 3.2.0 release",
        &[
            "skill:changelog",
            "agent:changelog-writer",
            "skill:release-versioning",
            "agent:release-manager",
        ],
    ),
    p(
        Plain,
        "tag and publish version 1.4.0",
        &["skill:release-versioning", "agent:release-manager"],
    ),
    p(
        Plain,
        "write an ADR about choosing Kafka over RabbitMQ",
        &["skill:adr-writing"],
    ),
    p(
        Plain,
        "write a Mermaid sequence diagram of the login flow",
        &["skill:mermaid-diagrams"],
    ),
    p(
        Plain,
        "write a README for this repo",
        &["skill:readme-writing", "agent:doc-writer"],
    ),
    p(
        Entity,
        "have the doc-writer update the README for the new config flags",
        &["agent:doc-writer", "skill:readme-writing"],
    ),
    p(
        Plain,
        "how does the permission check work in this codebase? walk me through it",
        &["agent:codebase-explorer"],
    ),
    p(
        Plain,
        "give me feedback on the architecture of the new event system before we build it",
        &["agent:architecture-reviewer", "agent:backend-architect"],
    ),
    p(
        Plain,
        "set up a bot that reviews every pull request automatically in CI",
        &[
            "harness:pr-review-bot",
            "skill:github-actions",
            "skill:gitlab-ci",
        ],
    ),
    // --- Security -------------------------------------------------------------------------------
    p(
        Entity,
        "audit the auth module for security issues",
        &["skill:security-audit", "agent:security-auditor"],
    ),
    p(
        Entity,
        "ask the security-auditor to look at the file upload endpoint",
        &[
            "agent:security-auditor",
            "skill:security-audit",
            "skill:file-uploads",
        ],
    ),
    p(
        Plain,
        "scan our dependencies for known CVEs",
        &["skill:dependency-audit"],
    ),
    p(
        Entity,
        "did we ever commit the AWS secret key? check the git history",
        &["skill:secret-scanning", "mcp-server:git"],
    ),
    p(
        Plain,
        "threat model the new file sharing feature",
        &["skill:threat-modeling"],
    ),
    p(
        Plain,
        "CORS blocks requests from the admin app",
        &["skill:security-headers"],
    ),
    p(
        Plain,
        "check which of our dependencies are GPL",
        &["skill:license-compliance"],
    ),
    // --- Performance and debugging --------------------------------------------------------------
    p(
        Plain,
        "find out why the import job uses 100% CPU",
        &["skill:performance-profiling", "agent:performance-profiler"],
    ),
    p(
        Plain,
        "benchmark the old and the new JSON parser against each other",
        &["skill:benchmarking"],
    ),
    p(
        Plain,
        "what does this panic mean: thread 'main' panicked at 'index out of bounds'",
        &[
            "skill:stack-trace-reading",
            "agent:rust-expert",
            "agent:debugger",
        ],
    ),
    p(
        Entity,
        "use the debugger agent to find out why login returns 500",
        &["agent:debugger", "skill:systematic-debugging"],
    ),
    p(
        Entity,
        "use the performance-profiler agent on the report export",
        &["agent:performance-profiler", "skill:performance-profiling"],
    ),
    p(
        Entity,
        "look at the top Sentry error from last night and fix it",
        &[
            "mcp-server:sentry",
            "agent:debugger",
            "skill:stack-trace-reading",
        ],
    ),
    // --- Data and ML ----------------------------------------------------------------------------
    p(
        Plain,
        "load the sales CSV into pandas and tell me which region grew fastest",
        &[
            "skill:pandas-analysis",
            "agent:data-analyst",
            "skill:csv-cleaning",
        ],
    ),
    p(
        Plain,
        "plot monthly active users for the last year as a line chart",
        &[
            "skill:data-visualization",
            "skill:pandas-analysis",
            "agent:data-analyst",
        ],
    ),
    p(
        Entity,
        "query BigQuery for last week's signups by country",
        &[
            "skill:bigquery",
            "mcp-server:bigquery",
            "agent:data-analyst",
        ],
    ),
    p(
        Plain,
        "train a classifier that tags support tickets by topic",
        &["skill:ml-training", "agent:ml-engineer"],
    ),
    p(
        Plain,
        "our chatbot makes things up, make it answer only from the help center articles",
        &[
            "skill:rag-pipeline",
            "skill:prompt-engineering",
            "skill:llm-evals",
        ],
    ),
    p(
        Plain,
        "compare the new prompt against the old one on our 50 examples",
        &[
            "skill:llm-evals",
            "skill:prompt-engineering",
            "agent:prompt-engineer",
        ],
    ),
    p(
        Plain,
        "the Airflow DAG runs twice on backfill",
        &["skill:airflow-dags"],
    ),
    p(
        Plain,
        "the PySpark job runs out of memory on the join",
        &["skill:spark-jobs"],
    ),
    p(
        Plain,
        "did the new onboarding experiment win? here are the conversion numbers",
        &["skill:ab-testing-stats", "agent:data-analyst"],
    ),
    p(
        Plain,
        "store delivery zones as polygons and find which zone an address falls in",
        &["skill:geospatial"],
    ),
    p(
        Plain,
        "scrape the product prices from our supplier's site every day",
        &[
            "skill:web-scraping",
            "skill:cron-scheduling",
            "mcp-server:puppeteer",
            "mcp-server:fetch",
        ],
    ),
    p(
        Plain,
        "write a Jupyter notebook that explores the churn data",
        &[
            "skill:jupyter-notebooks",
            "skill:pandas-analysis",
            "skill:data-visualization",
            "agent:data-analyst",
        ],
    ),
    // --- Tools against live systems -------------------------------------------------------------
    p(
        Entity,
        "post a summary of today's deploy in the #releases Slack channel",
        &["mcp-server:slack"],
    ),
    p(
        Entity,
        "create Linear tickets for each TODO in the codebase",
        &["mcp-server:linear"],
    ),
    p(
        Entity,
        "use sequential-thinking to plan the migration in steps",
        &["mcp-server:sequential-thinking"],
    ),
    p(
        Entity,
        "fetch https://example.com/changelog and summarize what changed",
        &["mcp-server:fetch"],
    ),
    p(
        Entity,
        "what time is it in Tokyo right now?",
        &["mcp-server:time"],
    ),
    p(
        Plain,
        "remember that the staging database is called orders_stg",
        &["mcp-server:memory"],
    ),
    p(
        Entity,
        "check the customer's ticket in Zendesk and reproduce the bug",
        &["mcp-server:zendesk", "agent:debugger"],
    ),
    p(
        Plain,
        "who is on call for payments this week?",
        &["mcp-server:pagerduty"],
    ),
    p(
        Entity,
        "find the page about the deploy process in Confluence",
        &["mcp-server:confluence"],
    ),
    p(
        Plain,
        "is lodash still maintained and how many weekly downloads does it have?",
        &["mcp-server:npm-registry"],
    ),
    p(
        Entity,
        "search the web for the latest Node LTS version",
        &["mcp-server:web-search", "mcp-server:fetch"],
    ),
    p(
        Entity,
        "deploy the preview to Vercel and show me the build log",
        &["mcp-server:vercel"],
    ),
    p(
        Entity,
        "add a DNS record for api.example.com on Cloudflare",
        &["mcp-server:cloudflare"],
    ),
    p(
        Plain,
        "look up how the lifecycle block of the aws_s3_bucket resource works",
        &[
            "mcp-server:terraform-registry",
            "skill:terraform",
            "mcp-server:library-docs",
        ],
    ),
    p(
        Plain,
        "what's the current API of pydantic v2 validators?",
        &["mcp-server:library-docs"],
    ),
    // --- Only a manual entry fits ---------------------------------------------------------------
    p(
        ManualOnly,
        "read the spec in Notion and implement the export feature it describes",
        &["mcp-server:notion"],
    ),
    p(
        ManualOnly,
        "submit the new iOS build to the App Store",
        &["skill:app-store-release"],
    ),
    p(
        ManualOnly,
        "book an external penetration test for the enterprise launch and draft its scope",
        &["skill:penetration-test"],
    ),
    p(
        ManualOnly,
        "a customer asked us to delete all their personal data under GDPR",
        &["skill:gdpr-requests"],
    ),
    p(
        ManualOnly,
        "someone dropped the invoices table in production, restore last night's backup",
        &["skill:database-restore"],
    ),
    p(
        ManualOnly,
        "a prospect wants our SOC 2 report, what do we need to get audited?",
        &["skill:soc2-compliance"],
    ),
    p(
        ManualOnly,
        "turn on branch protection for main so nobody can push to it directly",
        &["skill:branch-protection"],
    ),
    p(
        ManualOnly,
        "what's on my calendar tomorrow?",
        &["mcp-server:google-calendar"],
    ),
    p(
        ManualOnly,
        "find the email from the accountant about Q3 and summarize it",
        &["mcp-server:gmail"],
    ),
    p(
        ManualOnly,
        "pull the numbers from the budget sheet in our shared Google Drive",
        &["mcp-server:google-drive"],
    ),
    p(
        ManualOnly,
        "write a product brief with user stories for the team workspaces feature",
        &["agent:product-manager"],
    ),
    p(
        ManualOnly,
        "plan user interviews about the onboarding flow",
        &["agent:ux-researcher"],
    ),
    // --- No entry fits --------------------------------------------------------------------------
    p(NoFit, "what's the capital of France?", &[]),
    p(NoFit, "thanks, that looks good", &[]),
    p(NoFit, "tell me a joke about programmers", &[]),
    p(NoFit, "write a haiku about autumn leaves", &[]),
    p(
        NoFit,
        "summarize the plot of Hamlet in three sentences",
        &[],
    ),
    p(NoFit, "what's 17% of 2340?", &[]),
    p(NoFit, "how do I cook a mushroom risotto?", &[]),
    p(
        NoFit,
        "write a short birthday message for my coworker Sam",
        &[],
    ),
    p(NoFit, "ok, continue", &[]),
    p(NoFit, "good morning! ready when you are", &[]),
    p(
        NoFit,
        "fix the typo in the welcome banner: 'recieve' should be 'receive'",
        &[],
    ),
    p(
        NoFit,
        "add a comment with the author's name at the top of this file",
        &[],
    ),
    p(
        NoFit,
        "the coffee machine service on the third floor is broken, who fixes that?",
        &[],
    ),
    p(
        NoFit,
        "what's the difference between affect and effect?",
        &[],
    ),
    p(NoFit, "please answer in German from now on", &[]),
    p(NoFit, "how tall is Mount Everest?", &[]),
    p(NoFit, "convert 5 miles to kilometers", &[]),
    p(NoFit, "list three synonyms for 'fast'", &[]),
    p(NoFit, "pick a name for our new team's Slack channel", &[]),
    p(NoFit, "what's a good name for a grey cat?", &[]),
    p(NoFit, "how's your day going?", &[]),
    p(
        NoFit,
        "fix the grammar in this sentence: 'their going to the store tomorrow'",
        &[],
    ),
    p(NoFit, "can you explain what a monad is like I'm five?", &[]),
    p(
        NoFit,
        "write a limerick about a database with a sense of humour",
        &[],
    ),
    p(NoFit, "is a tomato a fruit or a vegetable?", &[]),
    p(
        NoFit,
        "write a thank-you note to the team for shipping the release",
        &[],
    ),
    p(NoFit, "I'm going to lunch, back in an hour", &[]),
    p(NoFit, "explain the castling rule in chess", &[]),
    p(NoFit, "how should I decorate a small apartment?", &[]),
    p(
        NoFit,
        "my cat walked across the keyboard, ignore the last message",
        &[],
    ),
];
