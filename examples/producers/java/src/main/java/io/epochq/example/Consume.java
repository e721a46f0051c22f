// Reads every event of an epochq namespace from Java, with the reader schema this consumer was
// built with, whatever schema version wrote each record: Avro's BinaryMessageDecoder finds the
// writer schema by fingerprint in a SchemaStore filled from <ns>.schemas and resolves the record
// into the reader schema. Records of event types the reader schema does not have are skipped and
// counted: the reader's body union is widened with an empty record of each such type's name
// (Avro Java would otherwise resolve an unknown branch into the first *other* record branch, a
// silent misreading). The guide: docs/consuming.md.
//
//   java -cp target/epochq-produce.jar io.epochq.example.Consume [-schemas DIR] [-version N] BOOTSTRAP NAMESPACE
//
// -version N reads with schemas/vN/event.avsc (default: the newest). Prints one JSON line per
// event ({"partition","offset","job_id","type","epoch","writer"}), then a summary line
// {"summary":{"read":N,"skipped":{TYPE:COUNT}}}; the skipped types are also named in one line on
// stderr.
package io.epochq.example;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.avro.AvroTypeException;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.SchemaStore;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class Consume {
    private static final String USAGE = "usage: Consume [-schemas DIR] [-version N] BOOTSTRAP NAMESPACE";
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] argv) {
        try {
            run(argv);
        } catch (Exception e) {
            System.err.println("epochq-consume: " + Produce.oneLine(e));
            System.exit(1);
        }
    }

    /** The writer schemas of <ns>.schemas by fingerprint, read again for one it does not have. */
    static final class LogSchemaStore implements SchemaStore {
        private final String bootstrap;
        private final String topic;
        private final Map<String, Schema> byKey = new HashMap<>();
        private final Map<String, String> texts = new HashMap<>();

        LogSchemaStore(String bootstrap, String namespace) {
            this.bootstrap = bootstrap;
            this.topic = namespace + ".schemas";
        }

        /** The key of <ns>.schemas: the fingerprint in wire order (little-endian), 16 hex digits. */
        static String key(long fingerprint) {
            byte[] wire = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(fingerprint).array();
            return HexFormat.of().formatHex(wire);
        }

        @Override
        public Schema findByFingerprint(long fingerprint) {
            String text = texts.get(key(fingerprint));
            return text == null ? null : byKey.computeIfAbsent(key(fingerprint), k -> new Schema.Parser().parse(text));
        }

        /** Whether a schema text really has the fingerprint of its key: anyone who may write the topic could put
         *  any text under any key. */
        static boolean genuine(String key, String text) {
            try {
                return key(SchemaNormalization.parsingFingerprint64(new Schema.Parser().parse(text))).equals(key);
            } catch (RuntimeException e) {
                return false;
            }
        }

        boolean has(String key) {
            return texts.containsKey(key);
        }

        /** The full names of every body type of every writer schema in the store. */
        Set<String> bodyTypes() {
            return texts.keySet().stream().map(k -> byKey.computeIfAbsent(k, x -> new Schema.Parser().parse(texts.get(x))))
                    .filter(s -> s.getField("body") != null)
                    .flatMap(s -> s.getField("body").schema().getTypes().stream().map(Schema::getFullName))
                    .collect(Collectors.toSet());
        }

        void load() {
            readAll(bootstrap, topic, record -> {
                String key = new String(record.key(), StandardCharsets.UTF_8);
                if (record.value() == null) {
                    texts.remove(key);
                } else if (genuine(key, new String(record.value(), StandardCharsets.UTF_8))) {
                    texts.put(key, new String(record.value(), StandardCharsets.UTF_8));
                } else { // the newest genuine entry of the key (if any) stays
                    System.err.println("ignored the schema under key " + key + " of " + topic
                            + ": its text does not have that fingerprint");
                }
            });
        }
    }

    static void run(String[] argv) throws Exception {
        Path schemas = Path.of("schemas");
        int version = 0;
        List<String> args = new ArrayList<>();
        for (int i = 0; i < argv.length; i++) {
            switch (argv[i]) {
                case "-schemas", "--schemas" -> schemas = Path.of(argv[++i]);
                case "-version", "--version" -> version = Integer.parseInt(argv[++i]);
                default -> args.add(argv[i]);
            }
        }
        if (args.size() != 2) {
            throw new IllegalArgumentException(USAGE);
        }
        String bootstrap = args.get(0), namespace = args.get(1);
        Path readerFile = readerSchema(schemas, version);
        String readerText = Files.readString(readerFile);
        Set<String> known = new Schema.Parser().parse(readerText).getField("body").schema().getTypes().stream()
                .map(Schema::getFullName).collect(Collectors.toSet());

        LogSchemaStore store = new LogSchemaStore(bootstrap, namespace);
        store.load();
        List<BinaryMessageDecoder<GenericRecord>> decoder = new ArrayList<>(List.of(widened(readerText, known, store)));
        int[] read = {0};
        Map<String, Integer> skipped = new TreeMap<>();
        readAll(bootstrap, namespace + ".events", record -> {
            byte[] value = record.value();
            String writer = HexFormat.of().formatHex(value, 2, 10);
            if (!store.has(writer)) { // registered since we read <ns>.schemas: read it again, widen again
                store.load();
                decoder.set(0, widened(readerText, known, store));
            }
            GenericRecord event;
            try {
                event = decoder.get(0).decode(value);
            } catch (IOException | AvroTypeException e) {
                throw new IllegalStateException(record.partition() + "@" + record.offset() + ": " + e.getMessage(), e);
            }
            String type = ((GenericRecord) event.get("body")).getSchema().getFullName();
            if (!known.contains(type)) {
                skipped.merge(type.substring(type.lastIndexOf('.') + 1), 1, Integer::sum);
                return;
            }
            read[0]++;
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("partition", record.partition());
            line.put("offset", record.offset());
            line.put("job_id", event.get("job_id") == null ? null : event.get("job_id").toString());
            line.put("type", ((GenericRecord) event.get("body")).getSchema().getName());
            line.put("epoch", event.get("epoch"));
            line.put("writer", writer);
            print(line);
        });
        print(Map.of("summary", Map.of("read", read[0], "skipped", skipped)));
        if (!skipped.isEmpty()) {
            System.err.println(skippedLine(skipped, readerVersion(readerFile)));
        }
    }

    /** A decoder into the reader schema, its body union widened with an empty record per type it lacks. */
    @SuppressWarnings("unchecked")
    static BinaryMessageDecoder<GenericRecord> widened(String readerText, Set<String> known, LogSchemaStore store)
            throws IOException {
        Map<String, Object> reader = JSON.readValue(readerText, Map.class);
        for (Object f : (List<Object>) reader.get("fields")) {
            Map<String, Object> field = (Map<String, Object>) f;
            if (field.get("name").equals("body")) {
                List<Object> branches = new ArrayList<>((List<Object>) field.get("type"));
                store.bodyTypes().stream().filter(t -> !known.contains(t)).sorted()
                        .forEach(t -> branches.add(Map.of("type", "record", "name", t, "fields", List.of())));
                field.put("type", branches);
            }
        }
        Schema schema = new Schema.Parser().parse(JSON.writeValueAsString(reader));
        return new BinaryMessageDecoder<>(GenericData.get(), schema, store);
    }

    /** schemas/vN/event.avsc, N given or the newest. */
    static Path readerSchema(Path root, int version) throws IOException {
        try (Stream<Path> dirs = Files.list(root)) {
            return dirs.filter(d -> d.getFileName().toString().matches("v\\d+"))
                    .filter(d -> Files.exists(d.resolve("event.avsc")))
                    .filter(d -> version == 0 || d.getFileName().toString().equals("v" + version))
                    .max(Comparator.comparingInt(Consume::readerVersion))
                    .map(d -> d.resolve("event.avsc"))
                    .orElseThrow(() -> new IllegalArgumentException("no schemas/v" + version + "/event.avsc under " + root));
        }
    }

    static int readerVersion(Path path) {
        Path dir = path.getFileName().toString().endsWith(".avsc") ? path.getParent() : path;
        return Integer.parseInt(dir.getFileName().toString().substring(1));
    }

    static String skippedLine(Map<String, Integer> skipped, int version) {
        int total = skipped.values().stream().mapToInt(Integer::intValue).sum();
        String kinds = skipped.entrySet().stream()
                .sorted(Map.Entry.<String, Integer>comparingByValue().reversed().thenComparing(Map.Entry.comparingByKey()))
                .map(e -> e.getKey() + " x" + e.getValue()).collect(Collectors.joining(", "));
        return "skipped " + total + " record(s) of " + skipped.size() + " type(s) this reader's schema (v" + version
                + ") does not have: " + kinds;
    }

    static void print(Object value) throws IOException {
        System.out.println(JSON.writeValueAsString(value));
    }

    interface RecordHandler {
        void accept(ConsumerRecord<byte[], byte[]> record) throws Exception;
    }

    /** Every committed record of every partition of topic, from the start to the end it has now (no group). */
    static void readAll(String bootstrap, String topic, RecordHandler handler) {
        Properties config = new Properties();
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config)) {
            List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofSeconds(30));
            List<TopicPartition> partitions = infos == null ? List.of()
                    : infos.stream().map(p -> new TopicPartition(topic, p.partition())).toList();
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions); // read_committed: the last stable offset
            while (ends.entrySet().stream().anyMatch(e -> consumer.position(e.getKey()) < e.getValue())) {
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
                    if (record.offset() < ends.get(new TopicPartition(topic, record.partition()))) {
                        handler.accept(record);
                    }
                }
            }
        } catch (RuntimeException e) {
            throw e;
        } catch (Exception e) {
            throw new IllegalStateException(e.getMessage(), e);
        }
    }
}
