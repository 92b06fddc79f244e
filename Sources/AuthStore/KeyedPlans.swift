import PGStore

/// How the store's reads by key are planned in the round trips that run them most: from
/// PostgreSQL's plan cache, with sequential scans priced out.
///
/// The session plans every statement for each run's values (`PGConnection`), because a generic
/// plan chosen while a table was small (a sequential scan for `request_id = ANY($1)`) could stay
/// chosen as the table grows. Planning is not free either: for a batch of one, the lookup's and
/// the prefetch's four keyed reads spent about 140 µs of PostgreSQL's CPU a login planning
/// (`pg_stat_statements`, 300 guest logins/s), more than they spent running. Between
/// `cachedKeyedPlans` and `plannedPerRun` (or the transaction's end, as both are `LOCAL`), a read
/// runs from the plan cache, and with sequential scans off the plan cached is the index's at
/// any table size: every statement there finds its rows through a unique or foreign key index.
enum KeyedPlans {
    /// From here to the end of the transaction (or `plannedPerRun`): cached plans, no
    /// sequential scans. (`set_config`, not `SET LOCAL`, which warns in a pipeline's implicit
    /// transaction.)
    static let cachedKeyedPlans: PGQuery =
        "SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true)"
    /// Back to the session's settings, inside an explicit transaction: plans for each run's
    /// values, the server's own `enable_seqscan`.
    static let plannedPerRun: [PGQuery] = [
        "SET LOCAL plan_cache_mode = force_custom_plan", "SET LOCAL enable_seqscan TO DEFAULT",
    ]
}
