import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.connectors.HttpConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.dbms.api.DatabaseManagementServiceBuilder;
import org.neo4j.graphdb.GraphDatabaseService;
import org.neo4j.io.ByteUnit;

/**
 * A throwaway Neo4j Community server for convostore's tests: the embedded DBMS with a
 * Bolt connector on a loopback port, its files in the given directory, authentication
 * on with the given password for the user neo4j.
 *
 * <p>Usage: {@code java Neo4jLauncher DIRECTORY PORT PASSWORD}. It prints a line starting
 * with {@code convostore-neo4j ready} once Bolt accepts connections, and runs until it is
 * ended: SIGTERM shuts the DBMS down cleanly, SIGKILL is a crash, after which starting it
 * again on the same directory recovers from the transaction log.
 */
public final class Neo4jLauncher {
    private Neo4jLauncher() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: Neo4jLauncher DIRECTORY PORT PASSWORD");
            System.exit(2);
        }
        Path home = Path.of(args[0]);
        int port = Integer.parseInt(args[1]);
        String password = args[2];
        DatabaseManagementService dbms = new DatabaseManagementServiceBuilder(home)
                .setConfig(BoltConnector.enabled, true)
                .setConfig(BoltConnector.listen_address, new SocketAddress("127.0.0.1", port))
                .setConfig(HttpConnector.enabled, false)
                .setConfig(GraphDatabaseSettings.auth_enabled, true)
                .setConfig(GraphDatabaseSettings.pagecache_memory, ByteUnit.mebiBytes(256))
                .setConfig(GraphDatabaseSettings.udc_enabled, false)
                // The tests empty the database before each test: its statistics swing
                // from nothing to a few nodes and back, which would have every query
                // planned again (seconds each for the largest) at every test.
                .setConfig(GraphDatabaseSettings.query_statistics_divergence_threshold, 1.0)
                .setConfig(GraphDatabaseSettings.cypher_min_replan_interval, Duration.ofHours(1))
                .build();
        Runtime.getRuntime().addShutdownHook(new Thread(dbms::shutdown));
        GraphDatabaseService system = dbms.database(GraphDatabaseSettings.SYSTEM_DATABASE_NAME);
        try {
            system.executeTransactionally(
                    "ALTER USER neo4j SET PASSWORD $password CHANGE NOT REQUIRED",
                    Map.of("password", password));
        } catch (RuntimeException alreadySet) {
            // A restart on the same directory: the password was set by the first start.
            System.out.println("password kept: " + alreadySet.getMessage());
        }
        System.out.println("convostore-neo4j ready on 127.0.0.1:" + port);
        System.out.flush();
        Thread.currentThread().join();
    }
}
