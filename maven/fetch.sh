#!/usr/bin/env bash
# make install's Maven step: Apache Kafka's broker jars and Spark's Kafka source into
# .kafka/ (see maven/pom.xml).  Needs java and mvn; says what it skipped when they are
# missing, so that `make test` can say the Apache Kafka tier did not run and why.
#   maven/fetch.sh [python]   python: the interpreter whose pyspark the connector must match
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3}
POM=maven/pom.xml
if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
  echo "maven/fetch.sh: SKIPPED fetching Apache Kafka and spark-sql-kafka jars:" \
       "$(command -v java >/dev/null || echo 'no java') $(command -v mvn >/dev/null || echo 'no mvn')" \
       "on PATH (install Java 17+ and Maven, then run make install)" >&2
  exit 0
fi
mvn -f "$POM" -B -q -Dstyle.color=never package || { echo "maven/fetch.sh: mvn could not fetch the broker jars" >&2; exit 1; }
kafka_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM")
echo "maven/fetch.sh: Apache Kafka ${kafka_version} jars in .kafka/${kafka_version}/libs"
# Kafka's own tools (the Java share-consumer peers of issue 28), in a directory of their own.
mvn -f "$POM" -B -q -Dstyle.color=never package -Ptools || { echo "maven/fetch.sh: mvn could not fetch kafka-tools" >&2; exit 1; }
echo "maven/fetch.sh: kafka-tools ${kafka_version} jars in .kafka/${kafka_version}/tools"

pyspark_version=$("$PY" -c 'import pyspark; print(pyspark.__version__)' 2>/dev/null || true)
if [ -z "$pyspark_version" ]; then
  echo "maven/fetch.sh: SKIPPED spark-sql-kafka (pyspark is not installed in $PY)" >&2
  exit 0
fi
if mvn -f "$POM" -B -q -Dstyle.color=never package -Pspark -Dspark.version="$pyspark_version" >/dev/null 2>&1; then
  spark_version=$pyspark_version
else
  # Maven Central may not carry the connector for a pyspark release yet: take the
  # version pinned in maven/pom.xml and say so.
  spark_version=$(sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' "$POM")
  echo "maven/fetch.sh: spark-sql-kafka-0-10_2.13:${pyspark_version} (the installed pyspark)" \
       "is not on Maven Central; using the pinned ${spark_version}" >&2
  mvn -f "$POM" -B -q -Dstyle.color=never package -Pspark || { echo "maven/fetch.sh: mvn could not fetch spark-sql-kafka" >&2; exit 1; }
fi
echo "maven/fetch.sh: spark-sql-kafka ${spark_version} jars in .kafka/spark-sql-kafka-${spark_version}/libs"
